//! The scheduler as a long-lived service, for `trellis serve`: one task owns
//! the [`Scheduler`] and takes requests from a channel, also while a run is
//! executing, so that a stop, an invalidation or a new request is answered
//! at once. Runs execute one after another; a materialize request made
//! during a run is given its id at once and queued behind it, which is how
//! overlapping requests never transform a view twice at the same time.
//!
//! Invariant: every request gets exactly one reply, and the service replies
//! only after what the request did is committed. It knows nothing of HTTP:
//! its errors are the scheduler's, its answers plain data.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::run::{Error, Invalidation, RunSummary, Scheduler};
use super::table::SharedTable;
use super::transition::Mode;
use crate::lattice::ViewId;
use crate::metastore::RunRecord;
use crate::model::ViewState;

type Reply<T> = oneshot::Sender<Result<T, Error>>;

/// How a run recorded by an earlier process and never finished ended.
pub const INTERRUPTED: &str = "interrupted: its process ended during the run";

/// What the service can be asked.
pub enum Request {
    /// Instantiates a pattern's views (so that the table shows them) and
    /// returns their indexes in the table; with `closure`, also those of
    /// everything they depend on, transitively.
    Instantiate {
        pattern: String,
        closure: bool,
        reply: Reply<Vec<u32>>,
    },
    Materialize {
        pattern: String,
        mode: Mode,
        reply: Reply<Accepted>,
    },
    Invalidate {
        pattern: String,
        dependencies: bool,
        reply: Reply<Invalidation>,
    },
    Plan {
        pattern: String,
        reply: Reply<Vec<(String, String)>>,
    },
    Stop {
        run: String,
        reply: oneshot::Sender<Result<Stopping, Error>>,
    },
    /// Finishes the current run within `grace` (then stops it), stops the
    /// queued ones, and ends the service.
    Shutdown {
        grace: Duration,
    },
}

/// A materialize request, accepted.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Accepted {
    pub run: String,
    /// Runs ahead of it; 0 when it starts at once.
    pub queued_behind: usize,
    /// The addressed views and their states now.
    pub views: Vec<(String, ViewState)>,
}

/// What a stop request found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "outcome", content = "termination")]
pub enum Stopping {
    /// The run is executing: it is being stopped.
    Stopping,
    /// It was queued: it will never start.
    Dequeued,
    /// It had already finished, so.
    Finished(String),
    /// No run has that id.
    Unknown,
}

/// A run accepted but not started.
pub(super) struct QueuedRun {
    pub record: RunRecord,
    pub mode: Mode,
    pub addressed: Vec<ViewId>,
}

/// What the loop of a run must do after a request was served.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Control {
    pub stop: bool,
    /// Stop when this passes (a shutdown's grace period).
    pub deadline: Option<tokio::time::Instant>,
    pub closing: bool,
}

/// The sending side, for the API. Cheap to clone.
#[derive(Clone)]
pub struct Handle {
    requests: mpsc::UnboundedSender<Request>,
    pub table: SharedTable,
}

/// The service is gone (shut down): said as an error, never a panic.
#[derive(Debug, thiserror::Error)]
#[error("the scheduler has shut down")]
pub struct Gone;

impl Handle {
    /// Sends a request built around a fresh reply channel and waits for the answer.
    pub async fn ask<T>(&self, request: impl FnOnce(oneshot::Sender<T>) -> Request) -> Result<T, Gone> {
        let (reply, answer) = oneshot::channel();
        self.requests.send(request(reply)).map_err(|_| Gone)?;
        answer.await.map_err(|_| Gone)
    }

    pub fn shutdown(&self, grace: Duration) {
        let _ = self.requests.send(Request::Shutdown { grace });
    }
}

impl Scheduler<'static> {
    /// Turns the scheduler into a service: returns its handle and the task
    /// to run, which ends after a shutdown request (or when every handle is
    /// dropped) once the current run has ended and the metastore is flushed.
    pub fn into_service(mut self) -> (Handle, impl std::future::Future<Output = Result<(), Error>> + Send) {
        let (sender, mut requests) = mpsc::unbounded_channel();
        let table = self.share_table();
        self.remember_freshness();
        let handle = Handle { requests: sender, table };
        let service = async move {
            let mut control = Control::default();
            loop {
                if let Some(next) = self.queued.pop_front() {
                    self.publish_queue();
                    if control.closing {
                        self.finish_unstarted(next.record, "stopped: the server shut down before it started")?;
                        continue;
                    }
                    let summary = self
                        .execute_run(
                            next.record,
                            next.mode,
                            next.addressed,
                            std::future::pending(),
                            Some(&mut requests),
                            &mut control,
                        )
                        .await;
                    log_summary(summary);
                    continue;
                }
                if control.closing {
                    break;
                }
                match requests.recv().await {
                    Some(request) => self.serve(request, None, &mut control),
                    None => break,
                }
            }
            self.metastore().flush()?;
            Ok(())
        };
        (handle, service)
    }
}

fn log_summary(summary: Result<RunSummary, Error>) {
    match summary {
        Ok(summary) => tracing::info!(
            run = %summary.id,
            termination = %summary.termination,
            views = summary.views(),
            failed = summary.failures.len(),
            "run finished"
        ),
        Err(e) => tracing::error!("run failed: {e}"),
    }
}

impl Scheduler<'_> {
    /// Serves one request; `current` is the run executing, if any. What
    /// goes wrong goes to the request's reply.
    pub(super) fn serve(&mut self, request: Request, current: Option<&str>, control: &mut Control) {
        match request {
            Request::Instantiate { pattern, closure, reply } => {
                let result = self.instantiate(&pattern).map(|ids| {
                    let ids = if closure { self.lattice().closure(&ids) } else { ids };
                    ids.into_iter().map(|id| id.0).collect()
                });
                let _ = reply.send(result);
            }
            Request::Materialize { pattern, mode, reply } => {
                let _ = reply.send(self.accept(&pattern, mode, current, control));
            }
            Request::Invalidate { pattern, dependencies, reply } => {
                let _ = reply.send(self.invalidate(&pattern, dependencies));
            }
            Request::Plan { pattern, reply } => {
                let _ = reply.send(self.plan(&pattern));
            }
            Request::Stop { run, reply } => {
                let outcome = self.stop_run(&run, current, control);
                let _ = reply.send(outcome);
            }
            Request::Shutdown { grace } => {
                control.closing = true;
                control.deadline = Some(tokio::time::Instant::now() + grace);
            }
        }
    }

    fn accept(
        &mut self,
        pattern: &str,
        mode: Mode,
        current: Option<&str>,
        control: &Control,
    ) -> Result<Accepted, Error> {
        if control.closing {
            return Err(Error::Closing);
        }
        let addressed = self.instantiate(pattern)?;
        let record = self.new_run(pattern, mode)?;
        let views = addressed.iter().map(|&id| (self.lattice().url_path(id), self.state_of(id))).collect();
        let queued_behind = self.queued.len() + usize::from(current.is_some());
        let run = record.id.clone();
        self.queued.push_back(QueuedRun { record, mode, addressed });
        self.publish_queue();
        Ok(Accepted { run, queued_behind, views })
    }

    fn stop_run(&mut self, run: &str, current: Option<&str>, control: &mut Control) -> Result<Stopping, Error> {
        if current == Some(run) {
            control.stop = true;
            return Ok(Stopping::Stopping);
        }
        if let Some(position) = self.queued.iter().position(|queued| queued.record.id == run) {
            let queued = self.queued.remove(position).expect("the position was just found");
            self.publish_queue();
            self.finish_unstarted(queued.record, "stopped by request before it started")?;
            return Ok(Stopping::Dequeued);
        }
        Ok(match self.metastore().run(run)? {
            Some(RunRecord { termination: Some(termination), .. }) => Stopping::Finished(termination),
            // Recorded but neither executing nor queued: a process that
            // died during it. It is over.
            Some(_) => Stopping::Finished(INTERRUPTED.into()),
            None => Stopping::Unknown,
        })
    }
}
