//! The pure state machine of one coordinator action:
//! `transition(state, event) -> (state, effects)`, like the view's in
//! `transition`. It knows no clock, no metastore and no policy: the driver
//! (`coordinate`) turns what happened into events, applies the new state
//! in a commit, and carries out the effects after it.
//!
//! HELPER-OWNED: the bodies and the golden table are being written.

use crate::model::ActionState;

/// What can happen to an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionEvent {
    /// Its inputs were looked at: `missing` of them lack their done flags.
    InputsChecked { missing: usize },
    /// Its timeout passed while it waited.
    TimedOut,
    /// The coordinator's `execution` passed it over.
    Skip,
    /// Its run was recorded, in the same commit as this change.
    Submitted,
    /// Its run began executing.
    RunStarted,
    /// Its run ended: successfully or not.
    RunEnded { succeeded: bool },
    /// Its run was stopped, or dequeued, by a shutdown: it is READY again,
    /// to run under a new run once the service is back.
    Interrupted,
    /// An operator killed it.
    Kill,
    /// An operator asked it to run again (`rerun`).
    Rerun,
    /// One of its external inputs was delivered again (`trigger = "data"`).
    Redelivered,
}

/// What the driver does after the commit of a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionEffect {
    /// Its run, queued, ends unstarted.
    Dequeue,
    /// Its run, executing, is stopped.
    StopRun,
    /// Its inputs are looked at again (it went back to WAITING).
    CheckInputs,
    /// Its run so far goes to its previous runs: a new one will follow.
    RetireRun,
}

/// The next state of an action in `state` on `event`, and what to do.
/// An event that does not apply to the state leaves it as it is, without
/// effects.
pub fn transition(state: ActionState, event: ActionEvent) -> (ActionState, Vec<ActionEffect>) {
    let _ = (state, event);
    todo!("helper")
}
