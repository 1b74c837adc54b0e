//! Engine drivers: trusted code on the host that runs the jobs
//! engine-backed transformation types describe (contract 1.2.0), on an
//! engine that computes where one machine is not enough. Apache Spark is
//! the one driver today (`spark`), through `spark-submit`, in local mode or
//! on a cluster.
//!
//! Invariants:
//! - A driver is given a job, the inputs' data paths and a staging
//!   directory, and only ever points the job at that staging directory to
//!   write; the scheduler publishes it (or discards it) as every view's.
//! - How a job ended is a value (`spark::Verdict`), never an error: the
//!   scheduler maps it to its failure classes.
//! - A job never outlives its run: on a stop or a deadline its process
//!   group is terminated, then killed after a grace period; the group also
//!   dies with trellis.
//! - It knows the catalog's settings and the runtime's plain types (the
//!   job, captured output, the memory budget), nothing of wasmtime, the
//!   scheduler's state or the metastore.
//!
//! # The room in detail
//!
//! (Moved here from ARCHITECTURE.md in issue 40, which keeps the
//! room's one paragraph and invariant.)
//!
//! engine drivers, trusted host code that runs the jobs
//! engine transformations describe. `network.rs` is the one list of what
//! counts as transient network trouble (Java and Python exception names,
//! SQLSTATE class 08, `io::ErrorKind`s), for the Spark outcome table now
//! and object stores next. `spark/` is the one driver:
//! - `mod.rs`: `Spark` (settings, where Spark is, kept once found and
//!   looked for again while missing, an engine
//!   semaphore of `concurrency` permits, the project's memory budget);
//!   `admit` (an engine permit, then `memory_mib` from the budget where the
//!   driver runs on this machine); `run` a `Submission` (the job, every
//!   dependency name with the data paths of its views that have data, the
//!   type's format and fields, the application's contents as loaded, the
//!   staging directory, the deadline, the output cap) to a `JobReport`
//!   (`Verdict`, counters, log lines, the streams kept). A job's files all
//!   live in a scratch directory inside its staging directory
//!   (`.trellis-spark/`: the job, the runner, the application, Spark's event
//!   log and `spark.local.dir`), so removing the staging directory removes
//!   all a job left, after a SIGKILL too.
//! - `install.rs`: `locate` (spark_home, `SPARK_HOME`, the PySpark in
//!   trellis's tools directory, the PATH; Java 17+ by `JAVA_HOME` or the
//!   PATH; each refusal one line) and `install` (PySpark pinned, pip's
//!   `--target` into a staging directory renamed into place, as
//!   componentize-py is).
//! - `submit.rs`: the argv and the whole environment of spark-submit
//!   (trellis's defaults, then `[engines.spark] conf`, then the job's, then
//!   trellis's own properties; a golden table), started in a process group
//!   of its own with `PR_SET_PDEATHSIG`; `Group` kills it when dropped;
//!   `terminate` (SIGTERM, SIGKILL after `grace`); `cluster_kill` (YARN by
//!   the application id spark-submit printed, Kubernetes by the driver pod
//!   trellis named); `Bounded` keeps each stream's first 4 KiB and last
//!   12 KiB, and the runner's `trellis: ` lines become the view's log lines;
//!   `capture` reads a stream in pieces of at most 64 KiB, so no line an
//!   application prints is ever held whole.
//! - `outcome.rs`: `verdict` from the runner's `result.json` (error class,
//!   SQLSTATE, Java exception) and how the process ended, never the exit
//!   code alone (a golden table): SQLSTATE classes of the statement or the
//!   data fatal, the engine's trouble retryable, the application's own
//!   exception a crash, a launcher failure fatal with its last line;
//!   network trouble (`engines::network`) is `Verdict::Network`.
//! - `eventlog.rs`: the event log (plain JSON lines) tailed every 500 ms
//!   across its rename at the end: the application id, jobs, stages and
//!   tasks for `trellis transformations`, and records read and written.
//! - `output.rs`: the job's files moved into the staging directory under
//!   trellis's names (`part-00000.csv`), Spark's bookkeeping left behind.
//! - `trellis_spark_runner.py` and `trellis_spark.py`: the program
//!   spark-submit runs (inputs read with their declared fields as the
//!   schema, every dependency name a table, empty where nothing has data;
//!   the query, or the user's application through `trellis_spark.job`;
//!   the output written in the type's format; `result.json` written by
//!   rename) and the module applications import. Embedded in the binary.
//!
//! Invariants: a driver only ever points a job at its staging directory to
//! write, and the scheduler publishes or discards it; how a job ended is a
//! value; a job never outlives its run (a stop or a deadline terminates its
//! group, which also dies with trellis); it knows the catalog's settings
//! and the runtime's plain types, nothing of wasmtime, scheduling state or
//! the metastore.

pub mod network;
pub mod spark;
