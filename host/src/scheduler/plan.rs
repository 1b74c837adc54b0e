//! What a run would do, without running it: `plan` judges every view of a
//! pattern and its dependencies as a run would, dependencies first, each
//! dependency standing as the run would leave it; `stale` is the same
//! judgement for the views a reader shows.

use std::collections::{HashMap, HashSet};

use super::Error;
use super::state::{Scheduler, Standing};
use super::transition::{Freshness, Mode, Reason};
use crate::lattice::ViewId;
use crate::metastore::ViewRecord;
use crate::model::ViewState;

impl Scheduler {
    /// For `plan`: what an incremental view's run would read, by its
    /// manifest check now (inputs that will be rematerialized first count
    /// as they stand).
    fn plan_increment(&self, id: ViewId, materialized: impl Fn(ViewId) -> bool) -> String {
        match self.merges(id) {
            None => return String::new(),
            Some(false) => {
                let plugin = self.lattice.view_type(id).transformation.plugin().unwrap_or_default();
                return format!("; incremental, but {plugin} does not export transform-incremental: reads everything");
            }
            Some(true) => {}
        }
        let inputs = self.inputs_with_data(id, materialized).into_iter().map(|(_, input)| input).collect();
        match super::txlog::prepare(&self.txlog_spec(id, inputs, false)) {
            Ok(prepared) => match &prepared.increment.full_reason {
                Some(reason) => format!("; incremental: reads everything ({reason})"),
                None => {
                    let files = prepared.new_files();
                    format!("; incremental: reads {files} new or changed file{}", if files == 1 { "" } else { "s" })
                }
            },
            Err(e) => format!("; incremental: cannot list an input ({e})"),
        }
    }

    /// For every view of `pattern` and its dependencies, dependencies first:
    /// whether a DEFAULT run would transform it now, and why. Each view is
    /// judged by [`Scheduler::judge`], as a run judges it, with each
    /// dependency standing as the run would leave it.
    pub fn plan(&mut self, pattern_text: &str) -> Result<Vec<(String, String)>, Error> {
        self.plan_in_mode(pattern_text, Mode::Default)
    }

    /// [`Scheduler::plan`] for a run in `mode`: what that run would do to
    /// each view, so that a mode can be tried before it is run.
    pub fn plan_in_mode(&mut self, pattern_text: &str, mode: Mode) -> Result<Vec<(String, String)>, Error> {
        self.transformations()?;
        let addressed = self.instantiate(pattern_text)?;
        let plan = match mode {
            Mode::TransformOnly | Mode::SetOnly => self.plan_alone(&addressed, mode),
            _ => self.plan_of(&addressed, mode),
        };
        Ok(plan.into_iter().map(|(id, line)| (self.slots[id.0 as usize].url.to_string(), line)).collect())
    }

    /// The plan of TRANSFORM_ONLY and SET_ONLY, which ask no dependency:
    /// the addressed views only, as the run's first step treats them.
    fn plan_alone(&self, addressed: &[ViewId], mode: Mode) -> Vec<(ViewId, String)> {
        addressed
            .iter()
            .map(|&id| {
                let once = self.lattice.view_type(id).materialize_once
                    && self.slots[id.0 as usize].record.state == ViewState::Materialized;
                let line = match mode {
                    Mode::SetOnly => "record as materialized without transforming (SET_ONLY)",
                    _ if once => "up to date (materialize_once)",
                    _ => "transform (TRANSFORM_ONLY: its dependencies are not asked)",
                };
                (id, line.to_string())
            })
            .collect()
    }

    /// Of the views at `indexes` (as the lattice numbers them), those
    /// materialized that `plan` would rematerialize, with its reason: the
    /// same judgement, so that a view shown stale is one a run rebuilds.
    pub fn stale(&mut self, indexes: &[u32]) -> Result<HashMap<u32, String>, Error> {
        self.transformations()?;
        let materialized: Vec<ViewId> = indexes
            .iter()
            .filter(|&&index| {
                self.slots.get(index as usize).is_some_and(|slot| slot.record.state == ViewState::Materialized)
            })
            .map(|&index| ViewId(index))
            .collect();
        let wanted: HashSet<ViewId> = materialized.iter().copied().collect();
        Ok(self
            .plan_of(&materialized, Mode::Default)
            .into_iter()
            .filter(|(id, _)| wanted.contains(id))
            .filter_map(|(id, line)| Some((id.0, line.strip_prefix("transform: ")?.to_string())))
            .collect())
    }

    /// The plan of `addressed` and their dependencies, dependencies first.
    /// `mode` is DEFAULT or one of the RESET modes, which ask dependencies
    /// as DEFAULT does.
    fn plan_of(&mut self, addressed: &[ViewId], mode: Mode) -> Vec<(ViewId, String)> {
        self.resolve_latest_below(addressed);
        let order = self.dependencies_first(addressed);
        let mut will_change = vec![false; self.lattice.len()];
        let mut no_data = vec![false; self.lattice.len()];
        let mut plan = Vec::with_capacity(order.len());
        for id in order {
            let judgement = self.judge(id, |dependency, slot| {
                let index = dependency.0 as usize;
                if no_data[index] {
                    Standing { state: ViewState::NoData, timestamp: None }
                } else if will_change[index] {
                    // Rematerialized: newer than anything recorded.
                    Standing { state: ViewState::Materialized, timestamp: Some(i64::MAX) }
                } else {
                    Standing { state: ViewState::Materialized, timestamp: slot.record.timestamp }
                }
            });
            let view_type = self.lattice.view_type(id);
            let record = &self.slots[id.0 as usize].record;
            let no_flag = judgement.freshness == Freshness::NoDoneFlag;
            let view_no_data = no_flag || judgement.settled.all_no_data;
            no_data[id.0 as usize] = view_no_data;
            let once = view_type.materialize_once && record.state == ViewState::Materialized;
            // RESET_TRANSFORMATION_CHECKSUMS records a change of version
            // alone, keeping the timestamp: its dependents see nothing newer.
            let version_only = mode == Mode::ResetTransformationChecksums
                && matches!(&judgement.freshness, Freshness::Outdated(Reason::VersionChanged { input: None, .. }));
            let explanation = match judgement.freshness {
                _ if view_no_data || once => None,
                Freshness::UpToDate | Freshness::NoDoneFlag => None,
                Freshness::Outdated(reason) => {
                    // A dependency rematerialized is the reason a user can act on first.
                    let changing = self.lattice.dependencies(id).iter().find(|d| will_change[d.0 as usize]);
                    Some(match changing {
                        Some(&dependency) => {
                            format!("dependency {} will be rematerialized", self.lattice.url_path(dependency))
                        }
                        // A failed view is tried again: when and why it
                        // failed is what a user acts on, not that it never
                        // was materialized.
                        None if record.state == ViewState::Failed => failed_text(record, &reason),
                        None => reason.to_string(),
                    })
                }
            };
            let line = match &explanation {
                _ if once => "up to date (materialize_once)".to_string(),
                _ if no_flag => format!("no data (no done flag at {})", self.lattice.done_flag_path(id).display()),
                _ if view_no_data && self.lattice.has_unsatisfied(id) => format!(
                    "no data (dependency {}: latest() found no instance with data)",
                    self.lattice.unsatisfied(id).join(", ")
                ),
                _ if view_no_data => "no data (no dependency has data)".to_string(),
                Some(reason) if version_only => {
                    format!(
                        "record the version checksum without transforming (RESET_TRANSFORMATION_CHECKSUMS): {reason}"
                    )
                }
                Some(reason) if mode == Mode::ResetTransformationChecksumsAndTimestamps => format!(
                    "record checksum and timestamp without transforming (RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS): {reason}"
                ),
                Some(reason) => {
                    let materialized = |d: ViewId| {
                        will_change[d.0 as usize] || self.slots[d.0 as usize].record.state == ViewState::Materialized
                    };
                    format!("transform: {reason}{}", self.plan_increment(id, materialized))
                }
                None => "up to date".to_string(),
            };
            will_change[id.0 as usize] = explanation.is_some() && !version_only;
            plan.push((id, line));
        }
        plan
    }
}

/// A failed view's plan: `failed at T (ERROR), will be retried`, and why
/// it is outdated besides never having been materialized.
fn failed_text(record: &ViewRecord, reason: &Reason) -> String {
    let at = record
        .failed_at
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map(|t| format!(" at {}", t.format("%Y-%m-%dT%H:%M:%SZ")))
        .unwrap_or_default();
    let error = record.last_error.as_deref().map(|e| format!(" ({e})")).unwrap_or_default();
    let besides = match reason {
        Reason::NeverMaterialized => String::new(),
        other => format!("; {other}"),
    };
    format!("failed{at}{error}, will be retried{besides}")
}
