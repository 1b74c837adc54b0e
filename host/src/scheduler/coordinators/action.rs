//! The pure state machine of one coordinator action:
//! `transition(state, event) -> (state, effects)`, like the view's in
//! `transition`. It knows no clock, no metastore and no policy: the driver
//! (`coordinate`) turns what happened into events, applies the new state
//! in a commit, and carries out the effects after it.

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
/// effects: a late report (a run that ends after its action was killed)
/// changes nothing.
pub fn transition(state: ActionState, event: ActionEvent) -> (ActionState, Vec<ActionEffect>) {
    use ActionEffect::{CheckInputs, Dequeue, RetireRun, StopRun};
    use ActionEvent as E;
    use ActionState as S;
    match (state, event) {
        (S::Waiting, E::InputsChecked { missing: 0 }) => (S::Ready, vec![]),
        // An input went missing again (deleted) before the action ran.
        (S::Ready, E::InputsChecked { missing }) if missing > 0 => (S::Waiting, vec![]),
        (S::Waiting, E::TimedOut) => (S::Timedout, vec![]),
        (S::Waiting | S::Ready, E::Skip) => (S::Skipped, vec![]),
        (S::Ready, E::Submitted) => (S::Submitted, vec![]),
        (S::Submitted, E::RunStarted) => (S::Running, vec![]),
        (S::Submitted | S::Running, E::RunEnded { succeeded: true }) => (S::Succeeded, vec![]),
        (S::Submitted | S::Running, E::RunEnded { succeeded: false }) => (S::Failed, vec![]),
        // Not the action's doing: it runs again, under a new run.
        (S::Submitted | S::Running, E::Interrupted) => (S::Ready, vec![RetireRun]),
        (S::Waiting | S::Ready, E::Kill) => (S::Killed, vec![]),
        (S::Submitted, E::Kill) => (S::Killed, vec![Dequeue]),
        (S::Running, E::Kill) => (S::Killed, vec![StopRun]),
        (state, E::Rerun) if state.is_final() => (S::Waiting, vec![RetireRun, CheckInputs]),
        (S::Succeeded | S::Failed, E::Redelivered) => (S::Waiting, vec![RetireRun, CheckInputs]),
        (state, _) => (state, vec![]),
    }
}

#[cfg(test)]
mod tests {
    use expect_test::expect;

    use super::*;

    const EVENTS: [ActionEvent; 12] = [
        ActionEvent::InputsChecked { missing: 0 },
        ActionEvent::InputsChecked { missing: 2 },
        ActionEvent::TimedOut,
        ActionEvent::Skip,
        ActionEvent::Submitted,
        ActionEvent::RunStarted,
        ActionEvent::RunEnded { succeeded: true },
        ActionEvent::RunEnded { succeeded: false },
        ActionEvent::Interrupted,
        ActionEvent::Kill,
        ActionEvent::Rerun,
        ActionEvent::Redelivered,
    ];

    /// Every state on every event: the whole machine in one table, so that
    /// a change to any cell shows in review.
    #[test]
    fn every_state_on_every_event() {
        let mut table = String::new();
        for state in ActionState::ALL {
            for event in EVENTS {
                let (next, effects) = transition(state, event);
                if next == state && effects.is_empty() {
                    continue;
                }
                let (state, event, next) = (state.as_str(), format!("{event:?}"), next.as_str());
                table.push_str(&format!("{state:<9} {event:<34} -> {next:<9} {effects:?}\n"));
            }
        }
        expect![[r#"
            WAITING   InputsChecked { missing: 0 }       -> READY     []
            WAITING   TimedOut                           -> TIMEDOUT  []
            WAITING   Skip                               -> SKIPPED   []
            WAITING   Kill                               -> KILLED    []
            READY     InputsChecked { missing: 2 }       -> WAITING   []
            READY     Skip                               -> SKIPPED   []
            READY     Submitted                          -> SUBMITTED []
            READY     Kill                               -> KILLED    []
            SUBMITTED RunStarted                         -> RUNNING   []
            SUBMITTED RunEnded { succeeded: true }       -> SUCCEEDED []
            SUBMITTED RunEnded { succeeded: false }      -> FAILED    []
            SUBMITTED Interrupted                        -> READY     [RetireRun]
            SUBMITTED Kill                               -> KILLED    [Dequeue]
            RUNNING   RunEnded { succeeded: true }       -> SUCCEEDED []
            RUNNING   RunEnded { succeeded: false }      -> FAILED    []
            RUNNING   Interrupted                        -> READY     [RetireRun]
            RUNNING   Kill                               -> KILLED    [StopRun]
            SUCCEEDED Rerun                              -> WAITING   [RetireRun, CheckInputs]
            SUCCEEDED Redelivered                        -> WAITING   [RetireRun, CheckInputs]
            FAILED    Rerun                              -> WAITING   [RetireRun, CheckInputs]
            FAILED    Redelivered                        -> WAITING   [RetireRun, CheckInputs]
            TIMEDOUT  Rerun                              -> WAITING   [RetireRun, CheckInputs]
            SKIPPED   Rerun                              -> WAITING   [RetireRun, CheckInputs]
            KILLED    Rerun                              -> WAITING   [RetireRun, CheckInputs]
        "#]]
        .assert_eq(&table);
    }

    /// Final states stay final on everything but an operator's rerun and,
    /// for a run that ended, a re-delivered input.
    #[test]
    fn final_states_reopen_only_by_rerun_or_redelivery() {
        for state in ActionState::ALL.into_iter().filter(|s| s.is_final()) {
            for event in EVENTS {
                let (next, _) = transition(state, event);
                let reopens = event == ActionEvent::Rerun
                    || (event == ActionEvent::Redelivered
                        && matches!(state, ActionState::Succeeded | ActionState::Failed));
                assert_eq!(next.is_final(), !reopens, "{state} on {event:?} -> {next}");
            }
        }
    }
}
