//! Following a Spark application through its event log: the JSON lines
//! Spark writes for every application, job, stage and task (with
//! `spark.eventLog.compress=false` and rolling off, one plain file). From
//! them come the application's id (which a cluster needs to kill it), the
//! progress shown while a job runs, and the rows it read and wrote. The
//! parsing is pure; `Tail` reads the file as it grows.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// What the log said so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    pub application: Option<String>,
    pub jobs_started: u32,
    pub jobs_succeeded: u32,
    pub jobs_failed: u32,
    /// Stages running now: id to (tasks done, tasks in all).
    pub stages: BTreeMap<u64, (u64, u64)>,
    pub stages_done: u32,
    pub tasks_failed: u64,
    pub records_read: u64,
    pub records_written: u64,
    pub bytes_written: u64,
}

impl Progress {
    /// One line for `trellis transformations` and the UI: "application
    /// local-1734…: job 2, stage 3 5/8 tasks".
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if let Some(app) = &self.application {
            parts.push(format!("application {app}"));
        }
        let jobs = self.jobs_succeeded + self.jobs_failed;
        if self.jobs_started > jobs {
            parts.push(format!("job {} running", jobs + 1));
        } else if self.jobs_started > 0 {
            parts.push(format!("{} job{} done", jobs, if jobs == 1 { "" } else { "s" }));
        } else {
            parts.push("starting".into());
        }
        for (stage, (done, all)) in &self.stages {
            parts.push(format!("stage {stage} {done}/{all} tasks"));
        }
        if self.tasks_failed > 0 {
            parts.push(format!("{} task{} failed", self.tasks_failed, if self.tasks_failed == 1 { "" } else { "s" }));
        }
        parts.join(", ")
    }

    /// Takes one line of the log; whether it changed what is shown.
    pub fn feed(&mut self, line: &str) -> bool {
        let Ok(event) = serde_json::from_str::<Event>(line) else { return false };
        match event.event.as_str() {
            "SparkListenerApplicationStart" => {
                self.application = event.app_id;
                true
            }
            "SparkListenerJobStart" => {
                self.jobs_started += 1;
                true
            }
            "SparkListenerJobEnd" => {
                let succeeded = event.job_result.is_some_and(|r| r.result == "JobSucceeded");
                if succeeded {
                    self.jobs_succeeded += 1;
                } else {
                    self.jobs_failed += 1;
                }
                true
            }
            "SparkListenerStageSubmitted" => {
                let Some(stage) = event.stage_info else { return false };
                self.stages.insert(stage.stage_id, (0, stage.tasks));
                true
            }
            "SparkListenerStageCompleted" => {
                let Some(stage) = event.stage_info else { return false };
                self.stages.remove(&stage.stage_id);
                self.stages_done += 1;
                true
            }
            "SparkListenerTaskEnd" => {
                let success = event.task_end_reason.is_some_and(|r| r.reason == "Success");
                if !success {
                    self.tasks_failed += 1;
                    return true;
                }
                if let Some(stage) = event.stage_id.and_then(|id| self.stages.get_mut(&id)) {
                    stage.0 += 1;
                }
                if let Some(metrics) = event.task_metrics {
                    if let Some(input) = metrics.input {
                        self.records_read += input.records_read;
                    }
                    if let Some(output) = metrics.output {
                        self.records_written += output.records_written;
                        self.bytes_written += output.bytes_written;
                    }
                }
                true
            }
            _ => false,
        }
    }
}

/// The parts of a listener event this reads; everything else is ignored.
#[derive(Deserialize)]
struct Event {
    #[serde(rename = "Event")]
    event: String,
    #[serde(rename = "App ID")]
    app_id: Option<String>,
    #[serde(rename = "Job Result")]
    job_result: Option<JobResult>,
    #[serde(rename = "Stage Info")]
    stage_info: Option<StageInfo>,
    #[serde(rename = "Stage ID")]
    stage_id: Option<u64>,
    #[serde(rename = "Task End Reason")]
    task_end_reason: Option<TaskEndReason>,
    #[serde(rename = "Task Metrics")]
    task_metrics: Option<TaskMetrics>,
}

#[derive(Deserialize)]
struct JobResult {
    #[serde(rename = "Result")]
    result: String,
}

#[derive(Deserialize)]
struct StageInfo {
    #[serde(rename = "Stage ID")]
    stage_id: u64,
    #[serde(rename = "Number of Tasks", default)]
    tasks: u64,
}

#[derive(Deserialize)]
struct TaskEndReason {
    #[serde(rename = "Reason")]
    reason: String,
}

#[derive(Deserialize)]
struct TaskMetrics {
    #[serde(rename = "Input Metrics")]
    input: Option<InputMetrics>,
    #[serde(rename = "Output Metrics")]
    output: Option<OutputMetrics>,
}

#[derive(Deserialize)]
struct InputMetrics {
    #[serde(rename = "Records Read", default)]
    records_read: u64,
}

#[derive(Deserialize)]
struct OutputMetrics {
    #[serde(rename = "Records Written", default)]
    records_written: u64,
    #[serde(rename = "Bytes Written", default)]
    bytes_written: u64,
}

/// Reads the event log of the one application in a directory as it grows:
/// Spark names the file after the application (`local-1734…`, with
/// `.inprogress` while it runs, renamed at its end), so the directory is
/// looked at until a file appears, and the file is reopened by its new
/// name when it is renamed.
pub struct Tail {
    dir: PathBuf,
    offset: u64,
    /// A line not yet ended by a newline.
    partial: String,
}

/// How much of the log one read takes at most: a burst of task events is
/// read over a few polls rather than held at once.
const READ_CHUNK: u64 = 4 << 20;

impl Tail {
    pub fn new(dir: &Path) -> Tail {
        Tail { dir: dir.to_path_buf(), offset: 0, partial: String::new() }
    }

    /// Feeds what was appended since the last call into `progress`;
    /// whether anything shown changed. A log that cannot be read is no
    /// progress, never a failure: it is only ever information.
    pub fn poll(&mut self, progress: &mut Progress) -> bool {
        let Some(file) = self.file() else { return false };
        let Ok(mut file) = std::fs::File::open(file) else { return false };
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return false;
        }
        let mut bytes = Vec::new();
        let Ok(read) = file.take(READ_CHUNK).read_to_end(&mut bytes) else { return false };
        self.offset += read as u64;
        self.partial.push_str(&String::from_utf8_lossy(&bytes));
        let mut changed = false;
        while let Some(end) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=end).collect();
            changed |= progress.feed(line.trim_end());
        }
        changed
    }

    /// Reads the rest of the log, however far behind the reading was: at
    /// the job's end, for its counters.
    pub fn finish(&mut self, progress: &mut Progress) {
        loop {
            let before = self.offset;
            self.poll(progress);
            if self.offset == before {
                return;
            }
        }
    }

    /// The log's file: the only regular file in the directory, whatever
    /// its name is now.
    fn file(&self) -> Option<PathBuf> {
        let entries = std::fs::read_dir(&self.dir).ok()?;
        entries
            .filter_map(Result::ok)
            .find(|entry| {
                entry.file_type().is_ok_and(|t| t.is_file()) && !entry.file_name().to_string_lossy().starts_with('.')
            })
            .map(|entry| entry.path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as Spark 4.3 writes them, cut to what is read (the real ones
    /// carry much more, which is ignored).
    const LOG: &str = r#"{"Event":"SparkListenerLogStart","Spark Version":"4.3.0"}
{"Event":"SparkListenerApplicationStart","App Name":"shop.datamart/TopShops/2015/05","App ID":"local-1796460449495","Timestamp":1}
{"Event":"SparkListenerJobStart","Job ID":0,"Stage Infos":[{"Stage ID":0,"Number of Tasks":2}]}
{"Event":"SparkListenerStageSubmitted","Stage Info":{"Stage ID":0,"Stage Attempt ID":0,"Number of Tasks":2}}
{"Event":"SparkListenerTaskEnd","Stage ID":0,"Task End Reason":{"Reason":"Success"},"Task Metrics":{"Input Metrics":{"Bytes Read":100,"Records Read":3},"Output Metrics":{"Bytes Written":0,"Records Written":0}}}
{"Event":"SparkListenerTaskEnd","Stage ID":0,"Task End Reason":{"Reason":"ExceptionFailure","Class Name":"java.lang.ArithmeticException"}}
{"Event":"SparkListenerTaskEnd","Stage ID":0,"Task End Reason":{"Reason":"Success"},"Task Metrics":{"Input Metrics":{"Bytes Read":100,"Records Read":4},"Output Metrics":{"Bytes Written":0,"Records Written":0}}}
{"Event":"SparkListenerStageCompleted","Stage Info":{"Stage ID":0,"Number of Tasks":2}}
{"Event":"SparkListenerStageSubmitted","Stage Info":{"Stage ID":1,"Number of Tasks":1}}
{"Event":"SparkListenerTaskEnd","Stage ID":1,"Task End Reason":{"Reason":"Success"},"Task Metrics":{"Output Metrics":{"Bytes Written":58,"Records Written":2}}}
{"Event":"SparkListenerStageCompleted","Stage Info":{"Stage ID":1,"Number of Tasks":1}}
{"Event":"SparkListenerJobEnd","Job ID":0,"Job Result":{"Result":"JobSucceeded"}}
not json at all
{"Event":"SparkListenerApplicationEnd","Timestamp":2}
"#;

    #[test]
    fn progress_follows_the_log_line_by_line() {
        let mut progress = Progress::default();
        let mut shown = Vec::new();
        for line in LOG.lines() {
            if progress.feed(line) {
                shown.push(progress.summary());
            }
        }
        shown.push(format!(
            "read {} records, wrote {} in {} bytes",
            progress.records_read, progress.records_written, progress.bytes_written
        ));
        expect_test::expect![[r#"
            application local-1796460449495, starting
            application local-1796460449495, job 1 running
            application local-1796460449495, job 1 running, stage 0 0/2 tasks
            application local-1796460449495, job 1 running, stage 0 1/2 tasks
            application local-1796460449495, job 1 running, stage 0 1/2 tasks, 1 task failed
            application local-1796460449495, job 1 running, stage 0 2/2 tasks, 1 task failed
            application local-1796460449495, job 1 running, 1 task failed
            application local-1796460449495, job 1 running, stage 1 0/1 tasks, 1 task failed
            application local-1796460449495, job 1 running, stage 1 1/1 tasks, 1 task failed
            application local-1796460449495, job 1 running, 1 task failed
            application local-1796460449495, 1 job done, 1 task failed
            read 7 records, wrote 2 in 58 bytes
        "#]]
        .assert_eq(&(shown.join("\n") + "\n"));
    }

    #[test]
    fn a_growing_file_renamed_at_its_end_is_read_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut tail = Tail::new(dir.path());
        let mut progress = Progress::default();
        assert!(!tail.poll(&mut progress), "no file yet");
        let running = dir.path().join("local-1.inprogress");
        let lines: Vec<&str> = LOG.lines().collect();
        // Half a line first: nothing is taken until its newline comes.
        std::fs::write(&running, format!("{}\n{}", lines[1], &lines[2][..10])).unwrap();
        assert!(tail.poll(&mut progress));
        assert_eq!(progress.application.as_deref(), Some("local-1796460449495"));
        assert_eq!(progress.jobs_started, 0);
        let mut rest = std::fs::OpenOptions::new().append(true).open(&running).unwrap();
        std::io::Write::write_all(&mut rest, format!("{}\n", &lines[2][10..]).as_bytes()).unwrap();
        std::fs::rename(&running, dir.path().join("local-1")).unwrap();
        assert!(tail.poll(&mut progress));
        assert_eq!(progress.jobs_started, 1);
        assert!(!tail.poll(&mut progress), "nothing new");
    }
}
