//! The pure translation from the actions of one `transition` to the view's
//! record and its flow status in the run: which timestamp a view gets (its
//! own, the transformation's, or now, SET_ONLY included; for external data,
//! with the done flag it was seen with), what it is flagged with, and
//! whether the run counts it idle or successful.
//!
//! Invariant: no I/O, no clock, no failure. Whatever it needs from outside
//! (now, the done flag found, the version checksum) comes in [`Facts`]; a
//! golden table covers every action in every mode.

use crate::metastore::{FlagIdentity, SeenFlag, ViewRecord};
use crate::model::{Counters, FlowStatus, ViewState};

use super::transition::{Action, Mode, Settled};

/// What the record translation needs beyond the record and the actions.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    pub mode: Mode,
    /// The type's current version checksum.
    pub version: &'a str,
    /// When the view's data was produced, by its transformation or, for
    /// external data, its done flag; `now` if nothing says.
    pub produced_at: Option<i64>,
    pub now: i64,
    /// How its dependencies settled in this run.
    pub settled: Option<Settled>,
    /// The view was no-data when the run started.
    pub no_data_before_run: bool,
    /// The done flag as read now (`None` inside: none), for a view whose
    /// record keeps it: external data, and a view marked materialized.
    pub flag_found: Option<Option<FlagIdentity>>,
    /// What the transformation returned with its data, if it ran and did.
    pub counters: Option<&'a Counters>,
}

/// The record after the actions, and what the run learns from them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub record: ViewRecord,
    /// The record must be written.
    pub changed: bool,
    /// The view's status in the run, when the actions set one.
    pub flow: Option<FlowStatus>,
    /// The error the view failed with.
    pub failure: Option<String>,
    /// What its transformation returned, for the run's flow.
    pub counters: Option<Counters>,
}

/// Applies `actions` to `record` (whose state is already the new one).
pub fn record(mut record: ViewRecord, actions: &[Action], facts: &Facts) -> Recorded {
    let mut changed = false;
    let mut flow = None;
    let mut failure = None;
    let mut counters = None;
    for action in actions {
        match action {
            Action::RecordMaterialized | Action::RecordWithoutTransforming => {
                record.invalidated = false;
                let settled = facts.settled.unwrap_or_default();
                record.version_checksum = Some(facts.version.to_string());
                // SET_ONLY and the dry run give a new timestamp too, as
                // seed 000 says: a view marked materialized is as new as
                // one transformed, so its dependents are rebuilt next.
                record.timestamp = Some(facts.produced_at.unwrap_or(facts.now));
                // External data is as new as trellis's first sight of its
                // flag as it is now, never as its mtime says.
                // (For a transformed view: what it published, so that data
                // gone later is told from a view SET_ONLY marked without any.)
                if let Some(flag) = facts.flag_found {
                    record.done_flag = Some(match (flag, record.timestamp) {
                        (Some(identity), Some(seen)) => SeenFlag::Present { identity, seen },
                        _ => SeenFlag::Absent,
                    });
                }
                record.incomplete = settled.some_no_data;
                record.errors = settled.some_failed || settled.some_errors;
                record.last_error = None;
                record.failed_at = None;
                // What this materialization returned; a view marked
                // materialized returned nothing.
                record.counters = facts.counters.cloned();
                counters = facts.counters.cloned();
                changed = true;
                flow = Some(FlowStatus::Successful);
            }
            Action::RecordVersion => {
                record.version_checksum = Some(facts.version.to_string());
                changed = true;
                flow = Some(FlowStatus::Successful);
            }
            Action::RecordNoData => {
                record.invalidated = false;
                // No data while a dependency failed is not the no-data of
                // seed 000 (all dependencies without data): it says so.
                let settled = facts.settled.unwrap_or_default();
                let errors_before = record.errors;
                record.incomplete = false;
                record.errors = settled.some_failed || settled.some_errors;
                if facts.flag_found.is_some() {
                    record.done_flag = Some(SeenFlag::Absent);
                }
                changed = true;
                // Still no data is nothing new.
                // (Without data now because a dependency failed, or no
                // longer so, is news.)
                let unchanged = record.timestamp.is_none()
                    && record.last_error.is_none()
                    && facts.no_data_before_run
                    && errors_before == record.errors;
                flow = Some(if unchanged { FlowStatus::Idle } else { FlowStatus::Successful });
            }
            Action::RecordFailed { error } => {
                record.last_error = Some(error.clone());
                record.failed_at = Some(facts.now);
                changed = true;
                failure = Some(error.clone());
                flow = Some(FlowStatus::TerminatedWithError);
            }
            Action::ReportIdle => flow = Some(FlowStatus::Idle),
            // Skipped for a failed dependency: the record stays as it was.
            Action::ReportSkipped => flow = Some(FlowStatus::Skipped),
            // Running once its task holds its permits (the run says so).
            Action::Transform => flow = Some(FlowStatus::Starting),
            _ => {
                flow = flow.or(Some(FlowStatus::Queued));
            }
        }
    }
    Recorded { record, changed, flow, failure, counters }
}

/// The stable state a view is stored as: in-flight states become what the
/// view had before (materialized if it ever was).
pub fn previous_stable(state: ViewState, record: &ViewRecord) -> ViewState {
    match state {
        ViewState::Waiting | ViewState::Transforming | ViewState::Retrying => {
            if record.timestamp.is_some() {
                ViewState::Materialized
            } else {
                ViewState::Receive
            }
        }
        stable => stable,
    }
}

#[cfg(test)]
mod tests {
    use std::fmt::Write;

    use expect_test::expect;

    use super::*;
    use crate::model::wire_name;

    fn show(recorded: &Recorded) -> String {
        let r = &recorded.record;
        let mut flags = Vec::new();
        if r.incomplete {
            flags.push("incomplete");
        }
        if r.errors {
            flags.push("errors");
        }
        if r.invalidated {
            flags.push("invalidated");
        }
        let flag = match r.done_flag {
            None => String::new(),
            Some(SeenFlag::Absent) => " done_flag=absent".into(),
            Some(SeenFlag::Present { identity, seen }) => {
                format!(
                    " done_flag=(mtime {} size {} inode {} seen {seen})",
                    identity.mtime_nanos, identity.size, identity.inode
                )
            }
        };
        // Shown only when there are some, so that the other lines read as before.
        let counters = |c: &Option<Counters>| match c {
            None => String::new(),
            Some(c) => format!(" counters={}", c.iter().map(|(k, v)| format!("{k}:{v}")).collect::<Vec<_>>().join(",")),
        };
        format!(
            "version={} ts={}{flag} flags=[{}] error={}{} | changed={} flow={} failure={}{}",
            r.version_checksum.as_deref().unwrap_or("-"),
            r.timestamp.map_or("-".into(), |t| t.to_string()),
            flags.join(","),
            r.last_error.as_deref().unwrap_or("-"),
            counters(&r.counters),
            recorded.changed,
            recorded.flow.map_or("-".into(), |f| wire_name(&f)),
            recorded.failure.as_deref().unwrap_or("-"),
            counters(&recorded.counters),
        )
    }

    /// Every recording action, on a view never materialized and on one
    /// materialized before (timestamp 100, version old, invalidated), in
    /// each mode that changes what is recorded.
    #[test]
    fn golden_table() {
        let fresh = ViewRecord { state: ViewState::Receive, ..ViewRecord::default() };
        let before = ViewRecord {
            state: ViewState::Materialized,
            version_checksum: Some("old".into()),
            timestamp: Some(100),
            invalidated: true,
            last_error: Some("earlier".into()),
            ..ViewRecord::default()
        };
        let actions = [
            vec![Action::RecordMaterialized, Action::NotifyDependents],
            vec![Action::RecordWithoutTransforming, Action::NotifyDependents],
            vec![Action::RecordVersion, Action::NotifyDependents],
            vec![Action::RecordNoData, Action::NotifyDependents],
            vec![Action::RecordFailed { error: "boom".into() }, Action::NotifyDependents],
            vec![Action::ReportIdle, Action::NotifyDependents],
            vec![Action::ReportSkipped, Action::NotifyDependents],
            vec![Action::Transform],
            vec![Action::AskDependencies],
        ];
        let settled = Settled { all_no_data: false, some_no_data: true, some_failed: true, some_errors: false };
        let mut table = String::new();
        for mode in [Mode::Default, Mode::SetOnly, Mode::ResetTransformationChecksumsAndTimestamps] {
            for (name, start) in [("fresh", &fresh), ("before", &before)] {
                for no_data_before_run in [false, true] {
                    for actions in &actions {
                        // Whether the view had no data before the run matters to no-data alone.
                        if no_data_before_run && actions[0] != Action::RecordNoData {
                            continue;
                        }
                        let facts = Facts {
                            mode,
                            version: "v2",
                            produced_at: None,
                            now: 500,
                            settled: Some(settled),
                            no_data_before_run,
                            flag_found: None,
                            counters: None,
                        };
                        let names: Vec<&str> = actions.iter().map(Action::name).collect();
                        let recorded = record(start.clone(), actions, &facts);
                        let _ = writeln!(
                            table,
                            "{:<44} {:<6} {:<5} {:<42} {}",
                            wire_name(&mode),
                            name,
                            if no_data_before_run { "nd" } else { "" },
                            names.join(","),
                            show(&recorded)
                        );
                    }
                }
            }
        }
        // A produced time wins over now.
        let facts = Facts {
            mode: Mode::Default,
            version: "v2",
            produced_at: Some(42),
            now: 500,
            settled: None,
            no_data_before_run: false,
            flag_found: None,
            counters: None,
        };
        let _ =
            writeln!(table, "produced_at=42: {}", show(&record(fresh.clone(), &[Action::RecordMaterialized], &facts)));
        // What the transformation returned goes to the record and the flow;
        // a view marked after it returns nothing, and the record forgets it.
        let returned: Counters = [("rows-in".to_string(), 7), ("rows-out".to_string(), 2)].into();
        let with = Facts { counters: Some(&returned), ..facts };
        let transformed = record(fresh.clone(), &[Action::RecordMaterialized], &with);
        let _ = writeln!(table, "counters returned: {}", show(&transformed));
        let marked = record(transformed.record.clone(), &[Action::RecordWithoutTransforming], &facts);
        let _ = writeln!(table, "marked after: {}", show(&marked));
        let failed = record(transformed.record, &[Action::RecordFailed { error: "boom".into() }], &facts);
        let _ = writeln!(table, "failed after: {}", show(&failed));
        // External data: the flag found is recorded with the time it was seen.
        let identity = FlagIdentity { mtime_nanos: 7_000_000, size: 0, inode: 9 };
        for (name, action, found) in [
            ("external, flag found", Action::RecordMaterialized, Some(identity)),
            ("external, dry run", Action::RecordWithoutTransforming, Some(identity)),
            ("external, no flag", Action::RecordNoData, None),
        ] {
            let facts = Facts {
                mode: Mode::ResetTransformationChecksumsAndTimestamps,
                version: "v2",
                produced_at: None,
                now: 500,
                settled: None,
                no_data_before_run: false,
                flag_found: Some(found),
                counters: None,
            };
            let _ = writeln!(table, "{name}: {}", show(&record(before.clone(), &[action], &facts)));
        }
        expect![[r#"
            DEFAULT                                      fresh        record-materialized,notify-dependents      version=v2 ts=500 flags=[incomplete,errors] error=- | changed=true flow=SUCCESSFUL failure=-
            DEFAULT                                      fresh        record-without-transforming,notify-dependents version=v2 ts=500 flags=[incomplete,errors] error=- | changed=true flow=SUCCESSFUL failure=-
            DEFAULT                                      fresh        record-version,notify-dependents           version=v2 ts=- flags=[] error=- | changed=true flow=SUCCESSFUL failure=-
            DEFAULT                                      fresh        record-no-data,notify-dependents           version=- ts=- flags=[errors] error=- | changed=true flow=SUCCESSFUL failure=-
            DEFAULT                                      fresh        record-failed,notify-dependents            version=- ts=- flags=[] error=boom | changed=true flow=TERMINATED_WITH_ERROR failure=boom
            DEFAULT                                      fresh        report-idle,notify-dependents              version=- ts=- flags=[] error=- | changed=false flow=IDLE failure=-
            DEFAULT                                      fresh        report-skipped,notify-dependents           version=- ts=- flags=[] error=- | changed=false flow=SKIPPED failure=-
            DEFAULT                                      fresh        transform                                  version=- ts=- flags=[] error=- | changed=false flow=STARTING failure=-
            DEFAULT                                      fresh        ask-dependencies                           version=- ts=- flags=[] error=- | changed=false flow=QUEUED failure=-
            DEFAULT                                      fresh  nd    record-no-data,notify-dependents           version=- ts=- flags=[errors] error=- | changed=true flow=SUCCESSFUL failure=-
            DEFAULT                                      before       record-materialized,notify-dependents      version=v2 ts=500 flags=[incomplete,errors] error=- | changed=true flow=SUCCESSFUL failure=-
            DEFAULT                                      before       record-without-transforming,notify-dependents version=v2 ts=500 flags=[incomplete,errors] error=- | changed=true flow=SUCCESSFUL failure=-
            DEFAULT                                      before       record-version,notify-dependents           version=v2 ts=100 flags=[invalidated] error=earlier | changed=true flow=SUCCESSFUL failure=-
            DEFAULT                                      before       record-no-data,notify-dependents           version=old ts=100 flags=[errors] error=earlier | changed=true flow=SUCCESSFUL failure=-
            DEFAULT                                      before       record-failed,notify-dependents            version=old ts=100 flags=[invalidated] error=boom | changed=true flow=TERMINATED_WITH_ERROR failure=boom
            DEFAULT                                      before       report-idle,notify-dependents              version=old ts=100 flags=[invalidated] error=earlier | changed=false flow=IDLE failure=-
            DEFAULT                                      before       report-skipped,notify-dependents           version=old ts=100 flags=[invalidated] error=earlier | changed=false flow=SKIPPED failure=-
            DEFAULT                                      before       transform                                  version=old ts=100 flags=[invalidated] error=earlier | changed=false flow=STARTING failure=-
            DEFAULT                                      before       ask-dependencies                           version=old ts=100 flags=[invalidated] error=earlier | changed=false flow=QUEUED failure=-
            DEFAULT                                      before nd    record-no-data,notify-dependents           version=old ts=100 flags=[errors] error=earlier | changed=true flow=SUCCESSFUL failure=-
            SET_ONLY                                     fresh        record-materialized,notify-dependents      version=v2 ts=500 flags=[incomplete,errors] error=- | changed=true flow=SUCCESSFUL failure=-
            SET_ONLY                                     fresh        record-without-transforming,notify-dependents version=v2 ts=500 flags=[incomplete,errors] error=- | changed=true flow=SUCCESSFUL failure=-
            SET_ONLY                                     fresh        record-version,notify-dependents           version=v2 ts=- flags=[] error=- | changed=true flow=SUCCESSFUL failure=-
            SET_ONLY                                     fresh        record-no-data,notify-dependents           version=- ts=- flags=[errors] error=- | changed=true flow=SUCCESSFUL failure=-
            SET_ONLY                                     fresh        record-failed,notify-dependents            version=- ts=- flags=[] error=boom | changed=true flow=TERMINATED_WITH_ERROR failure=boom
            SET_ONLY                                     fresh        report-idle,notify-dependents              version=- ts=- flags=[] error=- | changed=false flow=IDLE failure=-
            SET_ONLY                                     fresh        report-skipped,notify-dependents           version=- ts=- flags=[] error=- | changed=false flow=SKIPPED failure=-
            SET_ONLY                                     fresh        transform                                  version=- ts=- flags=[] error=- | changed=false flow=STARTING failure=-
            SET_ONLY                                     fresh        ask-dependencies                           version=- ts=- flags=[] error=- | changed=false flow=QUEUED failure=-
            SET_ONLY                                     fresh  nd    record-no-data,notify-dependents           version=- ts=- flags=[errors] error=- | changed=true flow=SUCCESSFUL failure=-
            SET_ONLY                                     before       record-materialized,notify-dependents      version=v2 ts=500 flags=[incomplete,errors] error=- | changed=true flow=SUCCESSFUL failure=-
            SET_ONLY                                     before       record-without-transforming,notify-dependents version=v2 ts=500 flags=[incomplete,errors] error=- | changed=true flow=SUCCESSFUL failure=-
            SET_ONLY                                     before       record-version,notify-dependents           version=v2 ts=100 flags=[invalidated] error=earlier | changed=true flow=SUCCESSFUL failure=-
            SET_ONLY                                     before       record-no-data,notify-dependents           version=old ts=100 flags=[errors] error=earlier | changed=true flow=SUCCESSFUL failure=-
            SET_ONLY                                     before       record-failed,notify-dependents            version=old ts=100 flags=[invalidated] error=boom | changed=true flow=TERMINATED_WITH_ERROR failure=boom
            SET_ONLY                                     before       report-idle,notify-dependents              version=old ts=100 flags=[invalidated] error=earlier | changed=false flow=IDLE failure=-
            SET_ONLY                                     before       report-skipped,notify-dependents           version=old ts=100 flags=[invalidated] error=earlier | changed=false flow=SKIPPED failure=-
            SET_ONLY                                     before       transform                                  version=old ts=100 flags=[invalidated] error=earlier | changed=false flow=STARTING failure=-
            SET_ONLY                                     before       ask-dependencies                           version=old ts=100 flags=[invalidated] error=earlier | changed=false flow=QUEUED failure=-
            SET_ONLY                                     before nd    record-no-data,notify-dependents           version=old ts=100 flags=[errors] error=earlier | changed=true flow=SUCCESSFUL failure=-
            RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS fresh        record-materialized,notify-dependents      version=v2 ts=500 flags=[incomplete,errors] error=- | changed=true flow=SUCCESSFUL failure=-
            RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS fresh        record-without-transforming,notify-dependents version=v2 ts=500 flags=[incomplete,errors] error=- | changed=true flow=SUCCESSFUL failure=-
            RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS fresh        record-version,notify-dependents           version=v2 ts=- flags=[] error=- | changed=true flow=SUCCESSFUL failure=-
            RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS fresh        record-no-data,notify-dependents           version=- ts=- flags=[errors] error=- | changed=true flow=SUCCESSFUL failure=-
            RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS fresh        record-failed,notify-dependents            version=- ts=- flags=[] error=boom | changed=true flow=TERMINATED_WITH_ERROR failure=boom
            RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS fresh        report-idle,notify-dependents              version=- ts=- flags=[] error=- | changed=false flow=IDLE failure=-
            RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS fresh        report-skipped,notify-dependents           version=- ts=- flags=[] error=- | changed=false flow=SKIPPED failure=-
            RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS fresh        transform                                  version=- ts=- flags=[] error=- | changed=false flow=STARTING failure=-
            RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS fresh        ask-dependencies                           version=- ts=- flags=[] error=- | changed=false flow=QUEUED failure=-
            RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS fresh  nd    record-no-data,notify-dependents           version=- ts=- flags=[errors] error=- | changed=true flow=SUCCESSFUL failure=-
            RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS before       record-materialized,notify-dependents      version=v2 ts=500 flags=[incomplete,errors] error=- | changed=true flow=SUCCESSFUL failure=-
            RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS before       record-without-transforming,notify-dependents version=v2 ts=500 flags=[incomplete,errors] error=- | changed=true flow=SUCCESSFUL failure=-
            RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS before       record-version,notify-dependents           version=v2 ts=100 flags=[invalidated] error=earlier | changed=true flow=SUCCESSFUL failure=-
            RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS before       record-no-data,notify-dependents           version=old ts=100 flags=[errors] error=earlier | changed=true flow=SUCCESSFUL failure=-
            RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS before       record-failed,notify-dependents            version=old ts=100 flags=[invalidated] error=boom | changed=true flow=TERMINATED_WITH_ERROR failure=boom
            RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS before       report-idle,notify-dependents              version=old ts=100 flags=[invalidated] error=earlier | changed=false flow=IDLE failure=-
            RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS before       report-skipped,notify-dependents           version=old ts=100 flags=[invalidated] error=earlier | changed=false flow=SKIPPED failure=-
            RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS before       transform                                  version=old ts=100 flags=[invalidated] error=earlier | changed=false flow=STARTING failure=-
            RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS before       ask-dependencies                           version=old ts=100 flags=[invalidated] error=earlier | changed=false flow=QUEUED failure=-
            RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS before nd    record-no-data,notify-dependents           version=old ts=100 flags=[errors] error=earlier | changed=true flow=SUCCESSFUL failure=-
            produced_at=42: version=v2 ts=42 flags=[] error=- | changed=true flow=SUCCESSFUL failure=-
            counters returned: version=v2 ts=42 flags=[] error=- counters=rows-in:7,rows-out:2 | changed=true flow=SUCCESSFUL failure=- counters=rows-in:7,rows-out:2
            marked after: version=v2 ts=42 flags=[] error=- | changed=true flow=SUCCESSFUL failure=-
            failed after: version=v2 ts=42 flags=[] error=boom counters=rows-in:7,rows-out:2 | changed=true flow=TERMINATED_WITH_ERROR failure=boom
            external, flag found: version=v2 ts=500 done_flag=(mtime 7000000 size 0 inode 9 seen 500) flags=[] error=- | changed=true flow=SUCCESSFUL failure=-
            external, dry run: version=v2 ts=500 done_flag=(mtime 7000000 size 0 inode 9 seen 500) flags=[] error=- | changed=true flow=SUCCESSFUL failure=-
            external, no flag: version=old ts=100 done_flag=absent flags=[] error=earlier | changed=true flow=SUCCESSFUL failure=-
        "#]].assert_eq(&table);
    }
}
