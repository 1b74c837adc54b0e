//! What a run would do, without running it: `plan` judges every view of a
//! pattern and its dependencies as a run would, dependencies first, each
//! dependency standing as the run would leave it; `stale` is the same
//! judgement for the views a reader shows. Its answers are [`Verdict`]s,
//! values a test can match; their one rendering to text is their
//! `Display`, which the CLI, the API and the console show.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::PathBuf;

use super::Error;
use super::state::Scheduler;
use super::transition::{Freshness, Mode, Reason};
use super::views::Standing;
use crate::lattice::ViewId;
use crate::metastore::ViewRecord;
use crate::model::ViewState;

/// What a run would do to one view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing: it is current (`once`: a `materialize_once` view, built).
    UpToDate { once: bool },
    /// It has no data, and the run records that.
    NoData(NoData),
    /// It is transformed, for this reason.
    Transform(Outdated),
    /// TRANSFORM_ONLY: transformed, its dependencies not asked.
    TransformAlone,
    /// SET_ONLY: recorded as materialized without transforming.
    SetOnly,
    /// RESET_TRANSFORMATION_CHECKSUMS: outdated by its version alone,
    /// which is recorded without transforming.
    RecordVersion(Why),
    /// RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS: outdated, recorded as
    /// current without transforming.
    RecordChecksumAndTimestamp(Why),
}

/// Why a view has no data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoData {
    /// An external view whose done flag is not there.
    NoDoneFlag { flag: PathBuf },
    /// Its `latest()` dependencies found no instance with data.
    Unsatisfied { dependencies: Vec<String> },
    /// None of its dependencies has data.
    NoDependencyData,
}

/// Why a view is transformed, and what an incremental one would read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outdated {
    pub why: Why,
    /// `None` for a view of a type not declared incremental.
    pub increment: Option<Increment>,
}

/// Why a view is outdated, as a user acts on it first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// A dependency is rematerialized first.
    DependencyRematerialized { dependency: String },
    /// It failed (when, with what error) and is tried again; `reason` is
    /// why it is outdated besides.
    Failed { at: Option<i64>, error: Option<String>, reason: Reason },
    /// Its own reason.
    Outdated(Reason),
}

/// What an incremental view's run would read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Increment {
    /// Its plugin does not export `transform-incremental`.
    NotExported { plugin: String },
    /// Everything, for this reason.
    Everything { reason: String },
    /// This many new or changed files.
    NewFiles(usize),
    /// An input could not be listed.
    CannotList { error: String },
}

impl Verdict {
    /// Whether the run transforms the view.
    pub fn transforms(&self) -> bool {
        matches!(self, Verdict::Transform(_) | Verdict::TransformAlone)
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::UpToDate { once: true } => f.write_str("up to date (materialize_once)"),
            Verdict::UpToDate { once: false } => f.write_str("up to date"),
            Verdict::NoData(no_data) => write!(f, "no data ({no_data})"),
            Verdict::Transform(outdated) => write!(f, "transform: {outdated}"),
            Verdict::TransformAlone => f.write_str("transform (TRANSFORM_ONLY: its dependencies are not asked)"),
            Verdict::SetOnly => f.write_str("record as materialized without transforming (SET_ONLY)"),
            Verdict::RecordVersion(why) => {
                write!(f, "record the version checksum without transforming (RESET_TRANSFORMATION_CHECKSUMS): {why}")
            }
            Verdict::RecordChecksumAndTimestamp(why) => write!(
                f,
                "record checksum and timestamp without transforming (RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS): {why}"
            ),
        }
    }
}

impl fmt::Display for NoData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoData::NoDoneFlag { flag } => write!(f, "no done flag at {}", flag.display()),
            NoData::Unsatisfied { dependencies } => {
                write!(f, "dependency {}: latest() found no instance with data", dependencies.join(", "))
            }
            NoData::NoDependencyData => f.write_str("no dependency has data"),
        }
    }
}

/// The reason and the increment, as `stale` shows a stale view.
impl fmt::Display for Outdated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.why)?;
        match &self.increment {
            Some(increment) => write!(f, "; {increment}"),
            None => Ok(()),
        }
    }
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Why::DependencyRematerialized { dependency } => write!(f, "dependency {dependency} will be rematerialized"),
            // `failed at T (ERROR), will be retried`, and why it is outdated
            // besides never having been materialized.
            Why::Failed { at, error, reason } => {
                f.write_str("failed")?;
                if let Some(at) = at.and_then(chrono::DateTime::from_timestamp_millis) {
                    write!(f, " at {}", at.format("%Y-%m-%dT%H:%M:%SZ"))?;
                }
                if let Some(error) = error {
                    write!(f, " ({error})")?;
                }
                f.write_str(", will be retried")?;
                match reason {
                    Reason::NeverMaterialized => Ok(()),
                    other => write!(f, "; {other}"),
                }
            }
            Why::Outdated(reason) => write!(f, "{reason}"),
        }
    }
}

impl fmt::Display for Increment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Increment::NotExported { plugin } => {
                write!(f, "incremental, but {plugin} does not export transform-incremental: reads everything")
            }
            Increment::Everything { reason } => write!(f, "incremental: reads everything ({reason})"),
            Increment::NewFiles(files) => {
                write!(f, "incremental: reads {files} new or changed file{}", if *files == 1 { "" } else { "s" })
            }
            Increment::CannotList { error } => write!(f, "incremental: cannot list an input ({error})"),
        }
    }
}

impl Scheduler {
    /// For `plan`: what an incremental view's run would read, by its
    /// manifest check now (inputs that will be rematerialized first count
    /// as they stand).
    fn plan_increment(&self, id: ViewId, materialized: impl Fn(ViewId) -> bool) -> Option<Increment> {
        if !self.merges(id)? {
            let plugin = self.views.lattice().view_type(id).transformation.plugin().unwrap_or_default().to_string();
            return Some(Increment::NotExported { plugin });
        }
        let inputs = self.inputs_with_data(id, materialized).into_iter().map(|(_, input)| input).collect();
        Some(match super::txlog::prepare(self.executor.staging().storage(), &self.txlog_spec(id, inputs, false)) {
            Ok(prepared) => match &prepared.increment.full_reason {
                Some(reason) => Increment::Everything { reason: reason.to_string() },
                None => Increment::NewFiles(prepared.new_files()),
            },
            Err(e) => Increment::CannotList { error: e.to_string() },
        })
    }

    /// For every view of `pattern` and its dependencies, dependencies first:
    /// whether a DEFAULT run would transform it now, and why. Each view is
    /// judged by [`Scheduler::judge`], as a run judges it, with each
    /// dependency standing as the run would leave it.
    pub fn plan(&mut self, pattern_text: &str) -> Result<Vec<(String, Verdict)>, Error> {
        self.plan_in_mode(pattern_text, Mode::Default)
    }

    /// [`Scheduler::plan`] for a run in `mode`: what that run would do to
    /// each view, so that a mode can be tried before it is run.
    pub fn plan_in_mode(&mut self, pattern_text: &str, mode: Mode) -> Result<Vec<(String, Verdict)>, Error> {
        self.check_plugins()?;
        let addressed = self.instantiate(pattern_text)?;
        let plan = match mode {
            Mode::TransformOnly | Mode::SetOnly => self.plan_alone(&addressed, mode),
            _ => self.plan_of(&addressed, mode),
        };
        Ok(plan.into_iter().map(|(id, verdict)| (self.views.url(id).to_string(), verdict)).collect())
    }

    /// The plan of TRANSFORM_ONLY and SET_ONLY, which ask no dependency:
    /// the addressed views only, as the run's first step treats them.
    fn plan_alone(&self, addressed: &[ViewId], mode: Mode) -> Vec<(ViewId, Verdict)> {
        addressed
            .iter()
            .map(|&id| {
                let once = self.views.lattice().view_type(id).materialize_once
                    && self.views.record(id).state == ViewState::Materialized;
                let verdict = match mode {
                    Mode::SetOnly => Verdict::SetOnly,
                    _ if once => Verdict::UpToDate { once: true },
                    _ => Verdict::TransformAlone,
                };
                (id, verdict)
            })
            .collect()
    }

    /// Of the views at `indexes` (as the lattice numbers them), those
    /// materialized that `plan` would rematerialize, with its reason: the
    /// same judgement, so that a view shown stale is one a run rebuilds.
    pub fn stale(&mut self, indexes: &[u32]) -> Result<HashMap<u32, Outdated>, Error> {
        self.check_plugins()?;
        let materialized: Vec<ViewId> = indexes
            .iter()
            .filter(|&&index| self.views.get(index).is_some_and(|slot| slot.record.state == ViewState::Materialized))
            .map(|&index| ViewId(index))
            .collect();
        let wanted: HashSet<ViewId> = materialized.iter().copied().collect();
        Ok(self
            .plan_of(&materialized, Mode::Default)
            .into_iter()
            .filter(|(id, _)| wanted.contains(id))
            .filter_map(|(id, verdict)| match verdict {
                Verdict::Transform(outdated) => Some((id.0, outdated)),
                _ => None,
            })
            .collect())
    }

    /// The plan of `addressed` and their dependencies, dependencies first.
    /// `mode` is DEFAULT or one of the RESET modes, which ask dependencies
    /// as DEFAULT does.
    fn plan_of(&mut self, addressed: &[ViewId], mode: Mode) -> Vec<(ViewId, Verdict)> {
        self.resolve_latest_below(addressed);
        let order = self.dependencies_first(addressed);
        self.views.sight_flags(order.iter().copied());
        let mut will_change = vec![false; self.views.lattice().len()];
        let mut no_data = vec![false; self.views.lattice().len()];
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
            let view_type = self.views.lattice().view_type(id);
            let record = &self.views.record(id);
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
                    let changing = self.views.lattice().dependencies(id).iter().find(|d| will_change[d.0 as usize]);
                    Some(match changing {
                        Some(&dependency) => {
                            Why::DependencyRematerialized { dependency: self.views.lattice().url_path(dependency) }
                        }
                        // A failed view is tried again: when and why it
                        // failed is what a user acts on, not that it never
                        // was materialized.
                        None if record.state == ViewState::Failed => failed(record, reason),
                        None => Why::Outdated(reason),
                    })
                }
            };
            will_change[id.0 as usize] = explanation.is_some() && !version_only;
            let verdict = match explanation {
                _ if once => Verdict::UpToDate { once: true },
                _ if no_flag => Verdict::NoData(NoData::NoDoneFlag { flag: self.views.lattice().done_flag_path(id) }),
                _ if view_no_data && self.views.lattice().has_unsatisfied(id) => {
                    let dependencies = self.views.lattice().unsatisfied(id).into_iter().map(str::to_string).collect();
                    Verdict::NoData(NoData::Unsatisfied { dependencies })
                }
                _ if view_no_data => Verdict::NoData(NoData::NoDependencyData),
                Some(why) if version_only => Verdict::RecordVersion(why),
                Some(why) if mode == Mode::ResetTransformationChecksumsAndTimestamps => {
                    Verdict::RecordChecksumAndTimestamp(why)
                }
                Some(why) => {
                    let materialized =
                        |d: ViewId| will_change[d.0 as usize] || self.views.record(d).state == ViewState::Materialized;
                    Verdict::Transform(Outdated { why, increment: self.plan_increment(id, materialized) })
                }
                None => Verdict::UpToDate { once: false },
            };
            plan.push((id, verdict));
        }
        self.views.forget_sightings();
        plan
    }
}

/// A failed view's reason: when and with what error it failed, and why it
/// is outdated besides never having been materialized.
fn failed(record: &ViewRecord, reason: Reason) -> Why {
    Why::Failed { at: record.failed_at, error: record.last_error.clone(), reason }
}
