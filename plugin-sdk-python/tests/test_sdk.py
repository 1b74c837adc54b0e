"""Native tests of the trellis_plugin SDK: no WebAssembly involved."""

from __future__ import annotations

import tempfile
import unittest
from pathlib import Path

from trellis_plugin import (
    Config, Data, Event, Fatal, Gap, Input, NoData, Request, Retryable, Transition, ViewState,
    _registry, checksum, listener, log, optional, or_fatal, required, testing, transformation,
)
from trellis_plugin.files import checked_relative


class ConfigTest(unittest.TestCase):
    def test_get_require_and_list(self) -> None:
        config = Config([("group-by", " shop , day,, "), ("file", "out.csv")])
        self.assertEqual(config["file"], "out.csv")
        self.assertEqual(config.get("nope"), None)
        self.assertEqual(config.get("nope", "x"), "x")
        self.assertEqual(config.list("group-by"), ["shop", "day"])
        self.assertEqual(config.list("nope"), [])
        with self.assertRaises(Fatal) as raised:
            config["nope"]
        self.assertEqual(raised.exception.message, "configuration key `nope` is required")
        self.assertEqual(list(config), ["group-by", "file"])
        self.assertEqual(Config({"a": "1"}), {"a": "1"})

    def test_declared_keys_are_checked(self) -> None:
        @transformation("t", "1", config=[required("a"), optional("b")])
        def run(request: Request) -> Data:
            return Data()

        with tempfile.TemporaryDirectory() as out:
            self.assertEqual(testing.run_transformation(run, output=out, config={"a": "1"}), Data())
            with self.assertRaisesRegex(Fatal, "`a` is required"):
                testing.run_transformation(run, output=out, config={"b": "1"})
            with self.assertRaisesRegex(Fatal, "`c` is not one of t's"):
                testing.run_transformation(run, output=out, config={"a": "1", "c": "2"})


class FilesTest(unittest.TestCase):
    def test_input_files_are_sorted_recursive_and_skip_bookkeeping(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp, "in")
            (root / "2015/05").mkdir(parents=True)
            (root / "_tmp").mkdir()
            for name in ["b.csv", "a.csv", "_SUCCESS", ".hidden", "2015/05/c.csv", "_tmp/d.csv"]:
                (root / name).write_text("x")
            request = testing.make_request(Path(tmp, "out"), {"orders": root})
            files = request.input_files()
            self.assertEqual([str(f) for f in files], ["orders:2015/05/c.csv", "orders:a.csv", "orders:b.csv"])
            self.assertEqual(files[1].path, root / "a.csv")
            self.assertEqual(request.input("orders"), request.inputs[0])
            self.assertIsNone(request.input("nope"))

    def test_missing_input_is_fatal(self) -> None:
        with self.assertRaisesRegex(Fatal, "cannot list input `orders`"):
            Input("orders", "/nonexistent/trellis").files()

    def test_output_paths_stay_inside_the_output_directory(self) -> None:
        request = Request(view="v", output="/output")
        self.assertEqual(request.output_path("a/b.csv"), Path("/output/a/b.csv"))
        for bad in ["", "../x", "/etc/passwd", "a/../../x", "./x"]:
            with self.assertRaises(Fatal, msg=bad):
                checked_relative(bad)

    def test_create_output_file_makes_directories_below_the_output_only(self) -> None:
        with tempfile.TemporaryDirectory() as out:
            request = Request(view="v", output=out)
            with request.create_output_file("a/b/c.txt") as f:
                f.write("x\r\n")
            self.assertEqual(Path(out, "a/b/c.txt").read_bytes(), b"x\r\n")
            self.assertTrue(request.output_dir("d/e").is_dir())


class OutcomeTest(unittest.TestCase):
    def test_counters(self) -> None:
        self.assertEqual(Data(rows_in=3, rows_out=1).counters, (("rows-in", 3), ("rows-out", 1)))
        self.assertEqual(Data({"a_b": 1}).counters, (("a_b", 1),))
        self.assertEqual(Data(rows_in=3)["rows-in"], 3)
        for bad in [-1, 1 << 64, 1.5, True]:
            with self.assertRaises(ValueError):
                Data(n=bad)

    def test_no_data_class_or_instance(self) -> None:
        from trellis_plugin.transformation import normalize_outcome

        self.assertEqual(NoData, NoData())
        self.assertEqual(normalize_outcome(NoData), NoData())

    def test_dict_and_bad_returns(self) -> None:
        from trellis_plugin.transformation import normalize_outcome

        self.assertEqual(normalize_outcome({"rows": 2}), Data(rows=2))
        with self.assertRaises(TypeError):
            normalize_outcome(None)


class FailureTest(unittest.TestCase):
    def test_or_fatal_names_the_context(self) -> None:
        with self.assertRaises(Fatal) as raised:
            with or_fatal("orders:a.csv"):
                open("/nonexistent/trellis")
        self.assertTrue(raised.exception.message.startswith("orders:a.csv: "))
        self.assertFalse(raised.exception.retryable)
        self.assertTrue(Retryable("x").retryable)

    def test_or_fatal_lets_bugs_through(self) -> None:
        with self.assertRaises(KeyError):
            with or_fatal("x"):
                {}["k"]


class LogTest(unittest.TestCase):
    def test_native_log_goes_to_python_logging(self) -> None:
        with self.assertLogs("trellis.plugin", level="INFO") as logs:
            log.info("read %d rows", 3)
            log.warn("careful")
        self.assertEqual([r.getMessage() for r in logs.records], ["read 3 rows", "careful"])

    def test_sink_can_be_replaced(self) -> None:
        seen: list[tuple[log.Level, str]] = []
        log.set_sink(lambda level, message: seen.append((level, message)))
        try:
            log.error("x=%s", 1)
        finally:
            log.set_sink(log._native)
        self.assertEqual(seen, [(log.Level.ERROR, "x=1")])


class WorldsTest(unittest.TestCase):
    def test_checksum_and_listener_run_natively(self) -> None:
        @checksum("c", "1")
        def length(input) -> str:
            return f"{input.transformation}:{len(input.resource('q') or b'')}"

        self.assertEqual(testing.run_checksum(length, "t", resources={"q": "abc"}), "t:3")

        @listener("l", "1", config=[optional("k")])
        class Recorder:
            def __init__(self, config: Config) -> None:
                self.events: list[Event] = []
                self.k = config.get("k")

            def on_event(self, event: Event) -> None:
                self.events.append(event)

        events = [Transition(1, "v", ViewState.RECEIVE, ViewState.WAITING), Gap(2, 5)]
        recorder = testing.run_listener(Recorder, {"k": "v"}, events)
        self.assertEqual(recorder.events, events)
        self.assertEqual(str(ViewState.NO_DATA), "no-data")


class RegistryTest(unittest.TestCase):
    def setUp(self) -> None:
        self.saved = list(_registry._plugins)
        _registry._plugins.clear()

    def tearDown(self) -> None:
        _registry._plugins[:] = self.saved

    def test_build_checks_one_plugin_of_the_kind(self) -> None:
        with self.assertRaisesRegex(_registry.BuildError, "declares no plugin"):
            _registry.find("m", "transformation")

        @transformation("t", "1")
        def run(request: Request) -> Data:
            return Data()

        self.assertIs(_registry.find("m", "transformation").target, run)
        with self.assertRaisesRegex(_registry.BuildError, 'declares a transformation .* kind = "listener"'):
            _registry.find("m", "listener")
        with self.assertRaisesRegex(_registry.BuildError, "unknown plugin kind"):
            _registry.find("m", "nope")
        transformation("u", "1")(lambda request: Data())
        with self.assertRaisesRegex(_registry.BuildError, "declares 2 plugins"):
            _registry.find("m", "transformation")

    def test_template_fills_with_str_format(self) -> None:
        template = Path(__file__).resolve().parent.parent / "trellis_main.py.tmpl"
        text = template.read_text().format(module="csv_aggregate", kind="checksum")
        compile(text, "trellis_main.py", "exec")
        self.assertIn("import csv_aggregate", text)
        self.assertIn("from trellis_plugin._guest.checksum import *", text)


if __name__ == "__main__":
    unittest.main()
