//! What a failed commit leaves behind: the book of views as it was, since
//! records are adopted only once committed (a real metastore, whose
//! commit counter is damaged so that its commits abort).

use std::sync::Arc;

use super::*;
use crate::catalog;

const PROJECT: &str = r#"
[[view]]
name = "t.a/Count"
parameters = [{ name = "n", type = "int" }]
"#;

fn scheduler(dir: &std::path::Path) -> Scheduler {
    let catalog = Arc::new(catalog::parse(PROJECT, dir).unwrap());
    Scheduler::open_records(catalog).unwrap()
}

#[test]
fn a_failed_commit_of_a_step_leaves_the_views_as_they_were() {
    let dir = tempfile::tempdir().unwrap();
    let mut scheduler = scheduler(dir.path());
    let addressed = scheduler.instantiate("t.a/Count/1").unwrap();
    let record = scheduler.new_run("t.a/Count/1", Mode::Default, false).unwrap();
    let mut run = scheduler.begin(record, Mode::Default, &addressed);
    let table = scheduler.share_table();
    scheduler.metastore().damage_commit_counter();
    let error = scheduler.step(&mut run).unwrap_err();
    assert!(error.to_string().contains("`commits` is unreadable"), "{error}");
    // The event asked the view (RECEIVE -> WAITING): not committed, not adopted.
    let id = addressed[0];
    assert_eq!(scheduler.state_of(id), ViewState::Receive);
    assert_eq!(scheduler.views.slot(id).stored_state, ViewState::Receive);
    let row = table.read().unwrap().views()[id.0 as usize].state;
    assert_eq!(row, ViewState::Receive, "the table follows the slots");
}

#[test]
fn a_failed_commit_of_an_invalidation_leaves_the_views_as_they_were() {
    let dir = tempfile::tempdir().unwrap();
    let mut scheduler = scheduler(dir.path());
    let addressed = scheduler.instantiate("t.a/Count/1").unwrap();
    scheduler.metastore().damage_commit_counter();
    let error = scheduler.invalidate("t.a/Count/1", false, |_| false).unwrap_err();
    assert!(error.to_string().contains("`commits` is unreadable"), "{error}");
    let record = scheduler.views.record(addressed[0]);
    assert_eq!((record.state, record.invalidated), (ViewState::Receive, false));
}
