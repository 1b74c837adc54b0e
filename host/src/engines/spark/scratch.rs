//! A job's scratch directory, Spark's own files inside the view's staging
//! directory: the runner, the module, the application, the job, and the
//! result the runner writes back; removed once the data is moved out.
//! The view's data itself is moved through the storage (`output.rs`).

use super::outcome::RunnerResult;
use super::submit::Scratch;
use super::{MODULE, RUNNER, Submission};
use crate::runtime::Application;

/// The job's scratch directory: the runner, the module, the application,
/// the event log's directory, Spark's scratch space, and the job itself.
pub(super) fn prepare(scratch: &Scratch, submission: &Submission) -> std::io::Result<()> {
    let runner = scratch.runner_dir();
    for dir in [&runner, &scratch.events(), &scratch.local()] {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(runner.join("trellis_spark_runner.py"), RUNNER)?;
    std::fs::write(runner.join("trellis_spark.py"), MODULE)?;
    let application = match (&submission.job.application, &submission.application) {
        (Application::Python(_), Some((name, content))) => {
            let path = scratch.application(name);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&path, content)?;
            serde_json::json!({ "python": path })
        }
        (Application::Python(name), None) => {
            return Err(std::io::Error::other(format!("the application `{name}` was not given")));
        }
        (Application::Sql(query), _) => serde_json::json!({ "sql": query }),
    };
    let time = |millis: i64| {
        chrono::DateTime::from_timestamp_millis(millis).map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
    };
    let job = serde_json::json!({
        "view": submission.view,
        "parameters": submission.parameters.iter().cloned().collect::<std::collections::BTreeMap<String, String>>(),
        "nominal_time": submission.nominal_time.and_then(time),
        "actual_time": time(submission.actual_time),
        "inputs": submission.sources,
        "output": {
            "path": scratch.output(),
            "format": submission.format,
            "fields": submission.fields,
            "files": submission.job.output_files,
        },
        "application": application,
        "arguments": submission.job.arguments,
        "result": scratch.result(),
    });
    std::fs::write(scratch.job(), serde_json::to_vec_pretty(&job).map_err(std::io::Error::other)?)
}

/// What the runner wrote back, if it wrote anything readable.
pub(super) fn result(scratch: &Scratch) -> Option<RunnerResult> {
    let bytes = std::fs::read(scratch.result()).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Whether the job wrote an output directory at all.
pub(super) fn wrote_output(scratch: &Scratch) -> bool {
    scratch.output().is_dir()
}

/// Removes the scratch directory and all Spark left in it.
pub(super) fn remove(scratch: &Scratch) -> std::io::Result<()> {
    std::fs::remove_dir_all(&scratch.dir)
}
