"""The program trellis runs with spark-submit to compute one view.

    spark-submit [options] --py-files trellis_spark.py trellis_spark_runner.py JOB.json

It reads the job description the host wrote (JOB.json), reads the view's
inputs as DataFrames registered as temporary views, runs the view's SQL query
or the user's PySpark application, writes the result into the output
directory (which the host then publishes), and writes a small result JSON
the host reads to classify the outcome:

    {"outcome": "data"} | {"outcome": "no-data"}
    {"outcome": "failed", "exception": ..., "error_class": ..., "sqlstate": ...,
     "java_exception": ..., "message": ...}

It exits 0 on success and 1 on any failure, with the traceback on stdout;
when the job description itself cannot be read there is no result file.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import tempfile
import traceback
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

import trellis_spark
from trellis_spark import Job, Output, log

# Trellis field types as Spark types. DECIMAL(38,18): trellis decimals have
# no declared precision, so the widest precision with room for fractions.
_SPARK_TYPES: dict[str, T.DataType] = {
    "string": T.StringType(),
    "int": T.IntegerType(),
    "long": T.LongType(),
    "double": T.DoubleType(),
    "decimal": T.DecimalType(38, 18),
    "boolean": T.BooleanType(),
    "date": T.DateType(),
    "timestamp": T.TimestampType(),
    "bytes": T.BinaryType(),
}

# Spark's file index already skips `_SUCCESS`, `.`-names and `_`-names,
# except `_`-names containing `=` (it takes them for partition directories,
# e.g. `_x=1.csv`): this glob, matched against file names only, drops those
# files too. A *directory* named like `_x=1` is still descended into.
_DATA_FILES_GLOB = "[!_.]*"

_MESSAGE_LIMIT = 500


@dataclass(frozen=True)
class InputSpec:
    name: str
    format: str
    fields: list[dict[str, str]]
    paths: list[str]


@dataclass(frozen=True)
class JobSpec:
    view: str
    parameters: dict[str, str]
    nominal_time: datetime | None
    actual_time: datetime | None
    inputs: list[InputSpec]
    output: Output
    sql: str | None
    python: str | None
    arguments: list[str]


def _locate(path: str) -> str:
    """`path`, or its basename in the working directory when `path` does not
    exist: in cluster deploy mode spark-submit ships files (`--files`) into
    the driver's working directory."""
    if os.path.exists(path):
        return path
    local = os.path.basename(path)
    return local if os.path.exists(local) else path


def _time(value: Any) -> datetime | None:
    if value is None:
        return None
    # fromisoformat takes a trailing `Z` only from Python 3.11 on.
    text = str(value)
    return datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)


def _parse_job(raw: Mapping[str, Any]) -> JobSpec:
    """The job description, checked enough that a malformed one fails here
    with the missing key rather than later with a confusing error."""

    def need(obj: Mapping[str, Any], key: str, where: str = "job") -> Any:
        if key not in obj:
            raise ValueError(f"job description: {where} has no {key!r}")
        return obj[key]

    output = need(raw, "output")
    application = need(raw, "application")
    if ("sql" in application) == ("python" in application):
        raise ValueError("job description: application needs exactly one of 'sql' and 'python'")
    return JobSpec(
        view=str(need(raw, "view")),
        parameters={str(k): str(v) for k, v in (raw.get("parameters") or {}).items()},
        nominal_time=_time(raw.get("nominal_time")),
        actual_time=_time(raw.get("actual_time")),
        inputs=[
            InputSpec(
                name=str(need(i, "name", "an input")),
                format=str(need(i, "format", "an input")),
                fields=list(i.get("fields") or []),
                paths=[str(p) for p in i.get("paths") or []],
            )
            for i in need(raw, "inputs")
        ],
        output=Output(
            path=str(need(output, "path", "output")),
            format=str(need(output, "format", "output")),
            files=int(output.get("files") or 0),
            fields=tuple(output.get("fields") or ()),
        ),
        sql=application.get("sql"),
        python=application.get("python"),
        arguments=[str(a) for a in raw.get("arguments") or []],
    )


def _schema(fields: Sequence[Mapping[str, str]], fmt: str) -> T.StructType:
    columns = []
    for f in fields:
        kind = f["type"]
        if kind not in _SPARK_TYPES:
            known = ", ".join(_SPARK_TYPES)
            raise ValueError(f"field {f['name']!r}: unknown type {kind!r} (known: {known})")
        # CSV holds no binary values: bytes are read as the text they are.
        spark_type = T.StringType() if kind == "bytes" and fmt == "csv" else _SPARK_TYPES[kind]
        columns.append(T.StructField(f["name"], spark_type, nullable=True))
    return T.StructType(columns)


def _quoted(name: str) -> str:
    # createOrReplaceTempView parses its argument as a (multi-part)
    # identifier: quoting keeps any name one part.
    return "`" + name.replace("`", "``") + "`"


def _read_input(spark: SparkSession, spec: InputSpec) -> DataFrame:
    schema = _schema(spec.fields, spec.format)
    if not spec.paths:
        log(f"input {spec.name}: no paths, empty ({len(schema.fields)} fields)")
        return spark.createDataFrame([], schema)
    reader = (
        spark.read.format(spec.format)
        # Inputs may have subdirectories (e.g. one per day); this also turns
        # off partition discovery, so `k=v` directories add no columns.
        .option("recursiveFileLookup", "true")
        .option("pathGlobFilter", _DATA_FILES_GLOB)
    )
    if spec.format == "csv":
        # Without declared fields every column is a string (no inference).
        reader = reader.option("header", "true")
    if schema.fields:
        reader = reader.schema(schema)
    log(f"input {spec.name}: {len(spec.paths)} path(s) ({spec.format})")
    return reader.load(spec.paths)


def _run_application(spark: SparkSession, spec: JobSpec, job: Job) -> str:
    """Runs the SQL query or the Python application; returns the outcome."""
    if spec.sql is not None:
        log("running SQL")
        job.write(spark.sql(spec.sql))
        return "data"
    assert spec.python is not None
    app = _locate(spec.python)
    log(f"running application {app}" + (f" {spec.arguments}" if spec.arguments else ""))
    sys.argv = [app, *spec.arguments]
    # As `python app.py` would: modules beside the application import.
    sys.path.insert(0, os.path.dirname(os.path.abspath(app)))
    try:
        runpy.run_path(app, run_name="__main__")
    except SystemExit as exit_:
        # sys.exit() / sys.exit(0) is the application finishing; any other
        # status is its failure, reported as SystemExit by the caller.
        if exit_.code is not None and exit_.code != 0:
            raise
    return job._outcome()


def _run(spark: SparkSession, spec: JobSpec) -> str:
    inputs: dict[str, DataFrame] = {}
    for input_spec in spec.inputs:
        df = _read_input(spark, input_spec)
        df.createOrReplaceTempView(_quoted(input_spec.name))
        inputs[input_spec.name] = df
    job = Job(
        spark=spark,
        view=spec.view,
        parameters=spec.parameters,
        nominal_time=spec.nominal_time,
        actual_time=spec.actual_time,
        inputs=inputs,
        input_paths={i.name: i.paths for i in spec.inputs},
        output=spec.output,
        arguments=spec.arguments,
    )
    trellis_spark.job = job
    return _run_application(spark, spec, job)


# -- failures -------------------------------------------------------------


def _first_line(text: str | None) -> str:
    # Spark's messages may start with a blank line (ParseException) and go
    # on with the query context and plan; the first non-blank line says it.
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return ""
    first = lines[0]
    # A failed Python UDF ([PYTHON_EXCEPTION]) carries the worker's traceback,
    # whose last line (`ValueError: ...`) is the one that says what failed.
    marker = "Traceback (most recent call last):"
    if first.endswith(marker) and len(lines) > 1:
        first = first[: -len(marker)] + lines[-1]
    return first


def _java_details(throwable: Any) -> tuple[str | None, str | None, str | None, str]:
    """(class, error class, SQL state, message) of a Java throwable, read
    through Py4J; whatever cannot be read is None."""
    from py4j.java_gateway import is_instance_of
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    name = condition = state = None
    message = ""
    try:
        name = throwable.getClass().getName()
        message = throwable.getMessage() or ""
        if is_instance_of(gateway, throwable, "org.apache.spark.SparkThrowable"):
            condition = throwable.getCondition()
            state = throwable.getSqlState()
        elif is_instance_of(gateway, throwable, "java.sql.SQLException"):
            state = throwable.getSQLState()
    except Exception:  # noqa: BLE001 - best effort: the JVM may be gone
        pass
    return name, condition, state, message


def _significant(top: Any) -> Any:
    """The throwable in `top`'s cause chain that says what went wrong.

    Spark 4.3 rethrows a task's own error as is when it has an error class
    (DIVIDE_BY_ZERO while writing arrives as SparkArithmeticException), but
    wraps others, and the wrappers carry SQL states of their own: a bad CSV
    value read with FAILFAST arrives as SparkException [FAILED_READ_FILE]
    KD001 > SparkException [MALFORMED_RECORD_IN_PARSING] 22023 >
    java.lang.NumberFormatException. So the *innermost* throwable with a SQL
    state is the cause; a virtual-machine error (OutOfMemoryError,
    StackOverflowError) anywhere in the chain wins, being about resources
    rather than data. Without either, the top one."""
    from py4j.java_gateway import is_instance_of
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    chosen = top
    throwable, depth = top, 0
    try:
        while throwable is not None and depth < 32:
            if is_instance_of(gateway, throwable, "java.lang.VirtualMachineError"):
                return throwable
            if _java_details(throwable)[2] is not None:
                chosen = throwable
            throwable, depth = throwable.getCause(), depth + 1
    except Exception:  # noqa: BLE001 - best effort: the JVM may be gone
        pass
    return chosen


def _describe_failure(error: BaseException) -> dict[str, Any]:
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    exception = type(error).__name__
    condition: str | None = None
    state: str | None = None
    java: str | None = None
    message = ""

    # The Java throwable behind the error: a Py4JJavaError's own, or the one
    # PySpark converted into a Python exception (kept only as `_origin`).
    throwable = None
    if isinstance(error, Py4JJavaError):
        throwable = error.java_exception
    elif isinstance(error, PySparkException):
        throwable = getattr(error, "_origin", None)
        try:
            condition, state = error.getCondition(), error.getSqlState()
        except Exception:  # noqa: BLE001
            pass
    if throwable is not None:
        java, java_condition, java_state, java_message = _java_details(_significant(throwable))
        condition, state = java_condition or condition, java_state or state
        message = _first_line(java_message)

    if isinstance(error, SystemExit):
        code = error.code
        message = f"the application exited with status {code}" if isinstance(code, int) else _first_line(str(code))
    if not message:
        message = _first_line(str(error)) or exception
    if state and state not in message:
        message = f"{message} SQLSTATE: {state}"
    return {
        "outcome": "failed",
        "exception": exception,
        "error_class": condition,
        "sqlstate": state,
        "java_exception": java,
        "message": message[:_MESSAGE_LIMIT],
    }


# -- main -----------------------------------------------------------------


def _write_result(path: str, record: Mapping[str, Any]) -> None:
    """Atomically: the host never reads half a result."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=".result-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(record, out)
            out.write("\n")
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2:
        print("usage: trellis_spark_runner.py JOB.json", file=sys.stderr)
        return 2
    job_path = _locate(argv[1])
    try:
        with open(job_path, encoding="utf-8") as source:
            raw = json.load(source)
        result_path = str(raw["result"])
    except Exception:  # noqa: BLE001 - no result file without its path
        traceback.print_exc(file=sys.stdout)
        print(f"trellis: cannot read the job description {job_path}", flush=True)
        return 1

    spark: SparkSession | None = None
    status = 1
    try:
        try:
            spec = _parse_job(raw)
            log(f"view {spec.view}")
            spark = SparkSession.builder.appName(spec.view).getOrCreate()
            record: dict[str, Any] = {"outcome": _run(spark, spec)}
            log(f"outcome: {record['outcome']}")
            status = 0
        except BaseException as error:  # noqa: BLE001 - every failure is reported
            # The traceback goes to stdout: the host captures both streams,
            # and stdout keeps it beside the trellis lines.
            traceback.print_exc(file=sys.stdout)
            try:
                record = _describe_failure(error)
            except Exception:  # noqa: BLE001
                record = {"outcome": "failed", "exception": type(error).__name__,
                          "error_class": None, "sqlstate": None, "java_exception": None,
                          "message": (_first_line(str(error)) or type(error).__name__)[:_MESSAGE_LIMIT]}
            log(f"failed: {record['exception']}: {record['message']}")
        _write_result(result_path, record)
    except Exception:  # noqa: BLE001 - the result itself could not be written
        traceback.print_exc(file=sys.stdout)
        status = 1
    finally:
        if spark is not None:
            try:
                spark.stop()
            except Exception:  # noqa: BLE001 - the outcome is already recorded
                traceback.print_exc(file=sys.stdout)
    return status


def _die_with_the_launcher() -> None:
    """The kernel kills this driver when the JVM that started it dies: the
    host arms the same for spark-submit, whose JVM is this process's parent,
    so that a SIGKILL of trellis leaves no driver behind. Linux only; where
    it cannot be armed, the host's process group still reaches it."""
    try:
        import ctypes

        pr_set_pdeathsig, sigkill = 1, 9
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, sigkill, 0, 0, 0)
    except (OSError, AttributeError):
        pass


if __name__ == "__main__":
    _die_with_the_launcher()
    sys.exit(main(sys.argv))
