//! Coordinators driven: a [`Coordination`] holds each declared
//! coordinator's record and open actions, creates the actions that are
//! due, checks their inputs, applies the pure `action` machine and
//! `policy`, and hands the service (or the embedded driver) the runs to
//! start. Every change of an action is committed (with its event) before
//! anything follows from it; an action is SUBMITTED in the commit that
//! records its run.
//!
//! Invariants: the metastore holds every action the moment it exists; a
//! SUBMITTED or RUNNING action's run is recorded, and after a crash that run
//! is resumed under its id, never started anew. It reads the time only from
//! its [`Clock`] and the file system only to look for done flags.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::Error;
use super::state::Scheduler;
use super::transition::Mode;
use crate::clock::Clock;
use crate::lattice::ViewId;
use crate::metastore::{ActionRecord, RunRecord};
use crate::model::{ActionState, Termination};

/// What `trellis coordinators` shows of one coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoordinatorStatus {
    pub name: String,
    pub suspended: bool,
    /// The nominal time of the last action created.
    pub last_nominal: Option<DateTime<Utc>>,
    /// The nominal time of the next action to create; `None` past `end`.
    pub next_nominal: Option<DateTime<Utc>>,
    /// Its actions, per state (states without actions are absent).
    pub counts: BTreeMap<ActionState, usize>,
}

/// A run an action submitted, for the caller to queue and start.
#[derive(Debug, Clone)]
pub struct Submission {
    pub record: RunRecord,
    pub mode: Mode,
    pub addressed: Vec<ViewId>,
}

/// The coordinators of one project, driven.
pub struct Coordination {
    clock: Clock,
}

impl Coordination {
    /// Loads the coordinators' records and open actions. SUBMITTED and
    /// RUNNING actions whose runs ended while the process was down take
    /// their runs' outcomes; those whose runs never ended are resumed (see
    /// [`Coordination::resumed`]).
    pub fn open(scheduler: &mut Scheduler, clock: Clock) -> Result<Coordination, Error> {
        let _ = scheduler;
        Ok(Coordination { clock })
    }

    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The runs of actions SUBMITTED or RUNNING when the process last
    /// ended, to start again under their ids; taken once, after `open`.
    pub fn resumed(&mut self, scheduler: &mut Scheduler) -> Result<Vec<Submission>, Error> {
        let _ = scheduler;
        todo!()
    }

    /// Brings every coordinator up to now: creates the actions due,
    /// checks the inputs of those waiting, times out, skips, and submits
    /// what the policies allow. Returns the runs submitted, in order.
    pub fn tick(&mut self, scheduler: &mut Scheduler) -> Result<Vec<Submission>, Error> {
        let _ = scheduler;
        todo!()
    }

    /// When a tick is next due by the clock (a nominal time, a timeout).
    pub fn next_due(&self) -> Option<DateTime<Utc>> {
        todo!()
    }

    /// A run started: its action, if it has one, is RUNNING.
    pub fn run_started(&mut self, scheduler: &mut Scheduler, run: &str) -> Result<(), Error> {
        let _ = (scheduler, run);
        todo!()
    }

    /// A run ended: its action, if it has one, SUCCEEDED or FAILED.
    pub fn run_ended(&mut self, scheduler: &mut Scheduler, run: &str, termination: Termination) -> Result<(), Error> {
        let _ = (scheduler, run, termination);
        todo!()
    }

    /// Every coordinator, in declaration order.
    pub fn statuses(&self) -> Vec<CoordinatorStatus> {
        todo!()
    }

    /// One coordinator's actions, in nominal order, those in `state` only
    /// when given. An unknown name is an error that lists the known ones.
    pub fn actions(
        &self,
        scheduler: &Scheduler,
        name: &str,
        state: Option<ActionState>,
    ) -> Result<Vec<ActionRecord>, Error> {
        let _ = (scheduler, name, state);
        todo!()
    }

    /// Suspends a coordinator: it creates and submits nothing until
    /// resumed (runs already submitted go on). Durable.
    pub fn suspend(&mut self, scheduler: &mut Scheduler, name: &str) -> Result<(), Error> {
        let _ = (scheduler, name);
        todo!()
    }

    pub fn resume(&mut self, scheduler: &mut Scheduler, name: &str) -> Result<(), Error> {
        let _ = (scheduler, name);
        todo!()
    }

    /// Kills a coordinator's actions with nominal times in `from..to` (all
    /// when both are `None`) that are not final. Returns those killed and
    /// the runs to dequeue or stop (their ids).
    pub fn kill(
        &mut self,
        scheduler: &mut Scheduler,
        name: &str,
        from: Option<DateTime<Utc>>,
        to: Option<DateTime<Utc>>,
    ) -> Result<(Vec<ActionRecord>, Vec<String>), Error> {
        let _ = (scheduler, name, from, to);
        todo!()
    }

    /// Puts a coordinator's final actions with nominal times in `from..to`
    /// back to WAITING, to run again under new runs. Returns them.
    pub fn rerun(
        &mut self,
        scheduler: &mut Scheduler,
        name: &str,
        from: Option<DateTime<Utc>>,
        to: Option<DateTime<Utc>>,
    ) -> Result<Vec<ActionRecord>, Error> {
        let _ = (scheduler, name, from, to);
        todo!()
    }
}
