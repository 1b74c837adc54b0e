//! The pure policy of one coordinator: given its declaration, what it has
//! created so far, its open actions and the time, which actions to create,
//! time out, skip and submit, and when it is next due. Oozie's rules:
//! `throttle` caps the actions WAITING (creation pauses), `concurrency` caps
//! those SUBMITTED or RUNNING, `execution` orders and skips (FIFO, LIFO,
//! LAST_ONLY, NONE). No clock, no I/O: everything is an argument.
//!
//! HELPER-OWNED: the bodies and the golden table are being written.

use chrono::{DateTime, Utc};

use crate::catalog::coordinator::Coordinator;
use crate::model::ActionState;

/// An action not in a final state, as the policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenAction {
    /// Milliseconds since the Unix epoch.
    pub nominal: i64,
    /// When it was created (milliseconds).
    pub actual: i64,
    pub state: ActionState,
}

/// The actions to create: the nominal times due by `now` after
/// `last_nominal` (all of them after downtime: catch-up), while fewer than
/// `throttle` would be WAITING, counting each new one as waiting; and the
/// next time creation is due (`None` when `end` is reached, or while the
/// throttle holds creation back: then a state change, not the clock,
/// frees it).
pub fn creations(
    coordinator: &Coordinator,
    last_nominal: Option<DateTime<Utc>>,
    waiting: usize,
    now: DateTime<Utc>,
) -> (Vec<DateTime<Utc>>, Option<DateTime<Utc>>) {
    let _ = (coordinator, last_nominal, waiting, now);
    todo!("helper")
}

/// What to do with a coordinator's open actions now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decisions {
    /// WAITING actions whose timeout has passed (by nominal time).
    pub time_out: Vec<i64>,
    /// Actions `execution` passes over, with the reason.
    pub skip: Vec<(i64, String)>,
    /// READY actions to submit now, in the order to run them.
    pub submit: Vec<i64>,
    /// The earliest timeout still to come, if any.
    pub next_due: Option<DateTime<Utc>>,
}

/// Decides over `open` (in nominal order, each state as it is now).
pub fn decide(coordinator: &Coordinator, open: &[OpenAction], now: DateTime<Utc>) -> Decisions {
    let _ = (coordinator, open, now);
    todo!("helper")
}
