"""The module a PySpark application imports to compute a trellis view.

Trellis runs the application inside its Spark runner, which has already
started Spark and read the view's inputs. The application reads them from
`job` and ends by handing over its result::

    from trellis_spark import job

    orders = job.input("orders")          # a DataFrame over every input path
    top = orders.groupBy("shop").sum("amount")
    job.write(top)                        # or job.no_data()

`job.write` writes in the view's own format. An application that writes by
itself saves to `job.output` (``df.write...save(job.output)``), with the
default save mode: the directory does not exist yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["Job", "Output", "TrellisJobError", "UnknownInputError", "job"]


def log(message: str) -> None:
    """One line for the view's log. Flushed at once: the JVM forwards the
    Python driver's stdout through a pipe, and lines must keep their order
    relative to Spark's own output."""
    print(f"trellis: {message}", flush=True)


class TrellisJobError(RuntimeError):
    """The application used the job wrongly (wrote nothing, handed its result
    over twice): the host fails the view without retrying, as the same code
    fails the same way again."""


class UnknownInputError(TrellisJobError, LookupError):
    """`Job.input` was asked for a name the view type does not declare."""


@dataclass(frozen=True)
class Output:
    """Where and how the view's data is written."""

    path: str
    """The directory to write; it does not exist yet."""
    format: str
    """The view type's format: csv, parquet, json or orc."""
    files: int = 0
    """Coalesce to this many files; 0 leaves Spark's partitioning."""
    fields: Sequence[Mapping[str, str]] = field(default_factory=tuple)
    """The view type's declared fields (``name``, ``type``); may be empty."""


class Job:
    """The view being computed, its inputs, and where its result goes."""

    def __init__(
        self,
        *,
        spark: SparkSession,
        view: str,
        parameters: Mapping[str, str],
        nominal_time: datetime | None,
        actual_time: datetime | None,
        inputs: Mapping[str, DataFrame],
        input_paths: Mapping[str, Sequence[str]],
        output: Output,
        arguments: Sequence[str],
    ) -> None:
        self._spark = spark
        self._view = view
        self._parameters = dict(parameters)
        self._nominal_time = nominal_time
        self._actual_time = actual_time
        self._inputs = dict(inputs)
        self._input_paths = {name: list(paths) for name, paths in input_paths.items()}
        self._output = output
        self._arguments = list(arguments)
        # What the application declared: None (nothing yet), "data" after
        # `write`, "no-data" after `no_data`.
        self._declared: str | None = None

    @property
    def spark(self) -> SparkSession:
        return self._spark

    @property
    def view(self) -> str:
        """The view's name, e.g. ``shop.datamart/TopShops/2015/05``."""
        return self._view

    @property
    def parameters(self) -> dict[str, str]:
        return dict(self._parameters)

    @property
    def nominal_time(self) -> datetime | None:
        """The view's nominal time (UTC), or None for a view without one."""
        return self._nominal_time

    @property
    def actual_time(self) -> datetime | None:
        """When trellis started computing the view (UTC)."""
        return self._actual_time

    @property
    def arguments(self) -> list[str]:
        """The application's arguments, also in ``sys.argv[1:]``."""
        return list(self._arguments)

    @property
    def inputs(self) -> dict[str, list[str]]:
        """Each input's name and the paths its DataFrame reads (possibly none)."""
        return {name: list(paths) for name, paths in self._input_paths.items()}

    @property
    def output(self) -> str:
        """The directory an application that writes by itself saves to."""
        return self._output.path

    @property
    def output_format(self) -> str:
        return self._output.format

    @property
    def output_fields(self) -> list[dict[str, str]]:
        """The view type's declared fields (``name``, ``type``); may be empty."""
        return [dict(f) for f in self._output.fields]

    def input(self, name: str) -> DataFrame:
        """The DataFrame over every path of input `name` (also registered as
        a temporary view of that name, for `spark.sql`)."""
        try:
            return self._inputs[name]
        except KeyError:
            known = ", ".join(self._inputs) or "none"
            raise UnknownInputError(
                f"no input named {name!r}; this view's inputs: {known}"
            ) from None

    def write(self, df: DataFrame) -> None:
        """Write `df` as the view's data, in the view's format."""
        if self._declared is not None:
            raise TrellisJobError(f"the result was already handed over ({self._declared})")
        output = self._output
        if output.files > 0:
            df = df.coalesce(output.files)
        writer = df.write.format(output.format)
        if output.format == "csv":
            writer = writer.option("header", "true")
        # Default save mode (error if the directory exists), never
        # "overwrite": overwrite deletes the target before the job runs.
        writer.save(output.path)
        self._declared = "data"
        files = f"{output.files} file(s)" if output.files > 0 else "Spark's partitioning"
        log(f"wrote {output.format} ({files}) to {output.path}")

    def no_data(self) -> None:
        """Declare that the view has no data for this run."""
        if self._declared is not None:
            raise TrellisJobError(f"the result was already handed over ({self._declared})")
        self._declared = "no-data"
        log("the application declared no data")

    def _outcome(self) -> str:
        """For the runner, once the application has finished: "data" or
        "no-data"; raises if the application handed over nothing or
        contradicted itself."""
        written = self._declared == "data" or self._output_exists()
        if self._declared == "no-data":
            if written:
                raise TrellisJobError(
                    f"the application called job.no_data() but also wrote to {self.output}"
                )
            return "no-data"
        if written:
            return "data"
        raise TrellisJobError(
            "the application finished without handing over a result: call "
            "job.write(df) to write a DataFrame in the view's format, save it "
            "yourself to job.output, or call job.no_data() if the view has no data"
        )

    def _output_exists(self) -> bool:
        # Through Hadoop's FileSystem rather than os.path: the output may be
        # on a cluster file system (hdfs://, s3a://) the driver cannot stat.
        jvm = self._spark.sparkContext._jvm
        assert jvm is not None
        path = jvm.org.apache.hadoop.fs.Path(self._output.path)
        fs = path.getFileSystem(self._spark.sparkContext._jsc.hadoopConfiguration())
        return bool(fs.exists(path))


class _NotRunByTrellis:
    """Stands for `job` until the runner sets it, so that an application run
    outside trellis fails with a message rather than on None."""

    def __getattr__(self, name: str) -> Any:
        raise TrellisJobError(
            "trellis_spark.job is only set when trellis runs the application "
            "(through its Spark runner)"
        )


job: Job = _NotRunByTrellis()  # type: ignore[assignment]
"""The job being run; set by the runner before the application starts."""
