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

pub mod network;
pub mod spark;
