"""Native tests of py-csv-aggregate (no WebAssembly):
`python3 -m unittest discover -s plugins/python/py-csv-aggregate` with
plugin-sdk-python on PYTHONPATH (the test adds it if it is not)."""

from __future__ import annotations

import sys
import tempfile
import unittest
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "plugin-sdk-python"))

import csv_rules  # noqa: E402
from py_csv_aggregate import Aggregate, run  # noqa: E402
from trellis_plugin import Data, Fatal, NoData, testing  # noqa: E402


class RulesTest(unittest.TestCase):
    def test_csv_reading_like_the_csv_crate(self) -> None:
        data = b'\xef\xbb\xbfa,b\r\n"x,""y""",2\n\n\nz,3'
        records = list(csv_rules.read_records(data))
        self.assertEqual([r.fields for r in records], [[b"a", b"b"], [b'x,"y"', b"2"], [b"z", b"3"]])
        self.assertEqual([r.line for r in records], [1, 1, 3])  # the crate's lines, CRLF and blank lines included

    def test_csv_writing_quotes_only_when_needed(self) -> None:
        self.assertEqual(csv_rules.write_record(["a b", 'q"', "x,y", "1"]), 'a b,"q""",' + '"x,y",1\n')
        self.assertEqual(csv_rules.write_record([""]), '""\n')
        self.assertEqual(csv_rules.write_record(["", ""]), ",\n")

    def test_decimals_like_rust_decimal(self) -> None:
        render = csv_rules.render_decimal
        self.assertEqual(render(csv_rules.parse_decimal("1.500")), "1.5")
        self.assertEqual(render(csv_rules.parse_decimal("-0.0")), "0")
        self.assertEqual(render(Decimal("1E+2")), "100")
        self.assertEqual(render(csv_rules.parse_decimal("+.5")), "0.5")
        for text, problem in [("1e5", "is not a number"), (".", "is not a number"), ("1_0", "is not a number"),
                              ("0." + "1" * 29, "has too many digits to add exactly"),
                              (str(1 << 96), "has too many digits to add exactly")]:
            with self.assertRaises(csv_rules.NumberError, msg=text) as raised:
                csv_rules.parse_decimal(text)
            self.assertEqual(str(raised.exception), problem)
        big = csv_rules.parse_decimal("7922816251426433759354395033.5")
        self.assertEqual(render(csv_rules.add_decimals(big, Decimal("0.1"))), "7922816251426433759354395034")
        with self.assertRaises(csv_rules.Overflow):
            csv_rules.add_decimals(Decimal((1 << 96) - 1), Decimal(1))

    def test_trim_is_rusts(self) -> None:
        self.assertEqual(csv_rules.trim("\u3000a\xa0 "), "a")
        self.assertEqual(csv_rules.trim("\x1fa"), "\x1fa")  # Python's strip() would drop \x1f

    def test_aggregate_parsing(self) -> None:
        self.assertEqual(Aggregate.parse("sum(amount)"), Aggregate("sum_amount", "sum", "amount"))
        self.assertEqual(Aggregate.parse(" t = SUM( a ) "), Aggregate("t", "sum", "a"))
        self.assertEqual(Aggregate.parse("count(*)"), Aggregate("count", "count", None))
        for bad in ["avg(a)", "sum(*)", "min()", "sum a", "sum(a"]:
            with self.assertRaises(Fatal, msg=bad):
                Aggregate.parse(bad)


class RunTest(unittest.TestCase):
    def run_on(self, files: dict[str, str], **config: str) -> tuple[Data | NoData, str]:
        with tempfile.TemporaryDirectory() as tmp:
            for name, text in files.items():
                Path(tmp, "in", name).parent.mkdir(parents=True, exist_ok=True)
                Path(tmp, "in", name).write_text(text)
            Path(tmp, "in").mkdir(exist_ok=True)
            outcome = testing.run_transformation(run, output=Path(tmp, "out"), inputs={"orders": Path(tmp, "in")},
                                                 config={k.replace("_", "-"): v for k, v in config.items()})
            out = Path(tmp, "out", config.get("file", "part-00000.csv"))
            return outcome, out.read_text() if out.exists() else ""

    def test_groups_sorted_with_counters(self) -> None:
        outcome, text = self.run_on(
            {"a.csv": "shop,amount\nb,1.50\na,2\nb,-3.25\n", "b.csv": "amount,shop\n10,a\n,c\n", "_SUCCESS": ""},
            group_by="shop", aggregates="sum(amount),count(*),min(amount),max(amount)")
        self.assertEqual(outcome, Data({"files": 2, "rows-in": 5, "rows-out": 3}))
        self.assertEqual(text, "shop,sum_amount,count,min_amount,max_amount\na,12,2,2,10\nb,-1.75,2,-3.25,1.5\nc,0,1,,\n")

    def test_no_rows_is_no_data(self) -> None:
        self.assertEqual(self.run_on({"a.csv": ""}, aggregates="count(*)")[0], NoData())
        self.assertEqual(self.run_on({"a.csv": "x\n"}, aggregates="count(*)")[0], NoData())

    def test_malformed_rows_are_fatal_with_file_and_line(self) -> None:
        cases = {
            "shop,amount\na,1\nb\n": "orders:a.csv line 3: malformed row: 1 fields where the header has 2",
            "shop,amount\na,x\n": "orders:a.csv line 2: column `amount`: `x` is not a number",
            "shop,amt\na,1\n": "orders:a.csv: no column `amount` (columns: shop, amt)",
        }
        for text, message in cases.items():
            with self.assertRaises(Fatal) as raised:
                self.run_on({"a.csv": text}, group_by="shop", aggregates="sum(amount)")
            self.assertEqual(raised.exception.message, message)


if __name__ == "__main__":
    unittest.main()
