//! `GET /events`: the event log as Server-Sent Events, followed from
//! `Last-Event-ID` (or `from`) through `Metastore::subscribe`, with gap
//! events for what retention removed and, with `run=ID`, an end event once
//! that run's record says it finished.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::Stream;

use super::extract::{Query, Shared};
use super::runs::{status_of, unknown_run};
use super::wire::{self, ErrorBody, StreamEvent};
use super::{ApiError, read};
use crate::metastore::Metastore;
use crate::model::{RunStatus, Termination, wire_name};
use crate::scheduler::table::SharedTable;

#[utoipa::path(get, path = "/events", params(wire::EventsQuery,
        ("Last-Event-ID" = Option<u64>, Header, description = "Resume after this sequence number")),
    responses((status = 200, description = "Server-Sent Events: `view` (an event of the log, its sequence number as id), `gap` (events removed by retention), `end` (the run followed has finished)", content_type = "text/event-stream"),
              (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn events(
    State(state): Shared,
    headers: HeaderMap,
    Query(query): Query<wire::EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let last =
        match headers.get("last-event-id") {
            None => None,
            Some(value) => {
                Some(value.to_str().ok().and_then(|text| text.trim().parse::<u64>().ok()).ok_or_else(|| {
                    ApiError::bad_request(format!("Last-Event-ID {value:?} is not a sequence number"))
                })?)
            }
        };
    let cursor = match (last, query.from) {
        (Some(last), _) => last.saturating_add(1),
        (None, Some(from)) => {
            // A sequence number the log has not reached yet would be a
            // stream that waits, silently, for events that may never come.
            let next = state.store.next_sequence()?;
            if from > next {
                return Err(ApiError::bad_request(format!(
                    "from {from} is past the log, whose next event is number {next}"
                )));
            }
            from
        }
        (None, None) => state.store.next_sequence()?,
    };
    if let Some(run) = &query.run
        && state.store.run(run)?.is_none()
    {
        return Err(unknown_run(run));
    }
    let follow = Follow {
        table: state.handle.table.clone(),
        server_started: state.started,
        store: state.store.clone(),
        appended: state.store.subscribe(),
        shutdown: state.shutdown.clone(),
        cursor,
        run: query.run,
        pending: VecDeque::new(),
        done: false,
    };
    Ok(Sse::new(futures_util::stream::unfold(follow, Follow::next)).keep_alive(KeepAlive::default()))
}

/// An SSE event of this kind with this data, after its id if it has one
/// (the fields are written in the order they are set).
fn event(id: Option<u64>, kind: StreamEvent, data: String) -> SseEvent {
    let event = match id {
        Some(id) => SseEvent::default().id(id.to_string()),
        None => SseEvent::default(),
    };
    event.event(wire_name(&kind)).data(data)
}

fn json(data: &impl serde::Serialize) -> String {
    serde_json::to_string(data).unwrap_or_default()
}

/// An event stream's position in the log.
struct Follow {
    table: SharedTable,
    server_started: i64,
    store: Arc<Metastore>,
    appended: tokio::sync::watch::Receiver<u64>,
    shutdown: tokio::sync::watch::Receiver<bool>,
    cursor: u64,
    run: Option<String>,
    pending: VecDeque<SseEvent>,
    done: bool,
}

impl Follow {
    async fn next(mut self) -> Option<(Result<SseEvent, Infallible>, Follow)> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some((Ok(event), self));
            }
            if self.done || *self.shutdown.borrow() {
                return None;
            }
            if let Err(e) = self.fill() {
                self.pending.push_back(event(None, StreamEvent::Error, e.to_string()));
                self.done = true;
                continue;
            }
            if !self.pending.is_empty() || self.done {
                continue;
            }
            // Caught up: wait for the next commit (every commit is announced,
            // a run's end, which is a record and no event, included).
            tokio::select! {
                changed = self.appended.changed() => if changed.is_err() { self.done = true },
                changed = self.shutdown.changed() => if changed.is_err() { self.done = true },
            }
        }
    }

    /// Queues what the log holds from the cursor on, a gap for what
    /// retention removed, and the end of a followed run that has finished.
    fn fill(&mut self) -> Result<(), crate::metastore::Error> {
        // Whether the run had finished is read before its events: every
        // event of a finished run was committed before its end.
        // A run an earlier process left unfinished never will finish: its
        // followers are told so rather than kept waiting.
        let finished = match &self.run {
            Some(run) => self.store.run(run)?.and_then(|record| {
                match status_of(&record, &read(&self.table), self.server_started) {
                    RunStatus::Interrupted => Some(Termination::Interrupted),
                    _ => record.termination,
                }
            }),
            None => None,
        };
        let first = self.store.first_sequence()?;
        if self.cursor < first {
            self.pending.push_back(event(
                None,
                StreamEvent::Gap,
                json(&wire::Gap { from: self.cursor, to: first - 1 }),
            ));
            self.cursor = first;
        }
        // Pages until something is queued or the log's end is reached:
        // pages of other runs' events are read through, not waited on.
        const PAGE: usize = 256;
        loop {
            let batch = self.store.events_from(self.cursor, PAGE)?;
            for logged in &batch {
                self.cursor = logged.sequence + 1;
                if self.run.as_deref().is_some_and(|run| logged.event.run_id.as_deref() != Some(run)) {
                    continue;
                }
                self.pending.push_back(event(Some(logged.sequence), StreamEvent::View, json(logged)));
            }
            if batch.len() < PAGE {
                if let (Some(run), Some(termination)) = (&self.run, &finished) {
                    let end = wire::End { run: run.clone(), termination: termination.clone() };
                    self.pending.push_back(event(None, StreamEvent::End, json(&end)));
                    self.done = true;
                }
                return Ok(());
            }
            if !self.pending.is_empty() {
                return Ok(());
            }
        }
    }
}
