//! What a transformation may leave behind: a bounded list of counters, and
//! an output directory of plain files and directories only, within its cap
//! of bytes and entries; and the watch that measures the output while the
//! call runs, so that a plugin writing without end is stopped soon after it
//! passes the cap, not at its deadline.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{Failure, FailureKind};

/// Most counters a transformation may report, and the longest name.
const COUNTER_LIMIT: usize = 64;
const COUNTER_NAME_LIMIT: usize = 128;

/// How much one call may leave in its output directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLimit {
    /// Bytes, by apparent size (a sparse file counts its full length).
    pub bytes: u64,
    /// Files and directories below the output directory.
    pub entries: u64,
}

/// The shortest time between two measurements while a call runs.
const FIRST_MEASUREMENT: Duration = Duration::from_millis(10);

/// A measurement waits this many times as long as the previous one took,
/// so that measuring costs at most about 1/20 of one thread while the
/// call runs, up to [`LONGEST_WAIT`].
const MEASUREMENT_SPACING: u32 = 20;

/// The longest wait between two measurements. What a call can write past
/// its cap is what it writes in this time and one walk; without a bound,
/// a call that first made ~100,000 entries (walks of tenths of a second)
/// would be measured seconds apart, and could write gigabytes meanwhile.
/// Past walks of 50 ms, measuring then costs more than 1/20 of a thread.
const LONGEST_WAIT: Duration = Duration::from_secs(1);

pub(super) fn check_counters(counters: &[(String, u64)]) -> Result<(), Failure> {
    if counters.len() > COUNTER_LIMIT {
        return Err(Failure::new(
            FailureKind::MalformedResult,
            format!("malformed result: {} counters, at most {COUNTER_LIMIT} are allowed", counters.len()),
        ));
    }
    if let Some((name, _)) = counters.iter().find(|(name, _)| name.len() > COUNTER_NAME_LIMIT) {
        return Err(Failure::new(
            FailureKind::MalformedResult,
            format!("malformed result: a counter name of {} bytes, at most {COUNTER_NAME_LIMIT}", name.len()),
        ));
    }
    Ok(())
}

/// What a walk of the output found (counted by the storage, which owns
/// the directories granted to plugins).
#[derive(Debug, Clone, Copy)]
struct Usage {
    bytes: u64,
    entries: u64,
}

/// Walks `dir` (links not followed) until it is over `limit`: what it
/// holds, and its first entry that is neither a file nor a directory.
fn measure(dir: &Path, limit: OutputLimit) -> std::io::Result<(Usage, Option<PathBuf>)> {
    let (usage, special) = crate::storage::grant::usage(dir, limit.bytes, limit.entries)?;
    Ok((Usage { bytes: usage.bytes, entries: usage.entries }, special))
}

/// The failure of an output found over its cap, if it is.
fn over_cap(usage: Usage, limit: OutputLimit) -> Option<Failure> {
    let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
    if usage.bytes > limit.bytes {
        return Some(Failure::new(
            FailureKind::OutputTooLarge,
            format!(
                "the output grew past its cap of {:.1} MiB ({:.1} MiB found so far); nothing was published",
                mib(limit.bytes),
                mib(usage.bytes)
            ),
        ));
    }
    if usage.entries > limit.entries {
        return Some(Failure::new(
            FailureKind::OutputTooLarge,
            format!(
                "the output grew past its cap of {} files and directories ({} found so far); nothing was published",
                limit.entries, usage.entries
            ),
        ));
    }
    None
}

/// The exact check once the call returned: the output may hold only
/// directories and regular files (a symlink left by the guest would point
/// readers of the published data anywhere), within `limit`.
pub fn check_output(dir: &Path, limit: OutputLimit) -> Result<(), Failure> {
    let (usage, special) = measure(dir, limit)
        .map_err(|e| Failure::new(FailureKind::Retryable, format!("cannot read the output {}: {e}", dir.display())))?;
    if let Some(failure) = over_cap(usage, limit) {
        return Err(failure);
    }
    if let Some(path) = special {
        return Err(Failure::new(
            FailureKind::MalformedResult,
            format!("the output holds {}, which is not a regular file or directory", path.display()),
        ));
    }
    Ok(())
}

/// Measures `dir` while a call runs, each measurement on a blocking thread
/// and spaced by [`MEASUREMENT_SPACING`] times the last one's duration, at
/// most [`LONGEST_WAIT`]; returns the failure once the output is over
/// `limit`, and never returns otherwise. Between two measurements the guest
/// may write on: the overshoot is what it writes in the wait and the walk
/// (10 ms for a small output, a second and the walk for a large one; a
/// walk stops at the cap).
pub(super) async fn watch_output(dir: PathBuf, limit: OutputLimit) -> Failure {
    let mut wait = FIRST_MEASUREMENT;
    loop {
        tokio::time::sleep(wait).await;
        let started = Instant::now();
        let walked = {
            let dir = dir.clone();
            tokio::task::spawn_blocking(move || measure(&dir, limit)).await
        };
        // A walk that fails (the guest removing what it wrote meanwhile)
        // is tried again; the exact check at the end has the last word.
        if let Ok(Ok((usage, _))) = walked
            && let Some(failure) = over_cap(usage, limit)
        {
            return failure;
        }
        wait = wait_after(started.elapsed());
    }
}

/// The wait before the next measurement, after one that took `walk`.
fn wait_after(walk: Duration) -> Duration {
    walk.saturating_mul(MEASUREMENT_SPACING).clamp(FIRST_MEASUREMENT, LONGEST_WAIT)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOMY: OutputLimit = OutputLimit { bytes: u64::MAX, entries: u64::MAX };

    #[test]
    fn bytes_and_entries_are_counted_through_directories() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("a/b/part"), vec![0; 1000]).unwrap();
        std::fs::write(dir.path().join("top"), vec![0; 24]).unwrap();
        let (usage, special) = measure(dir.path(), ROOMY).unwrap();
        assert_eq!((usage.bytes, usage.entries), (1024, 4));
        assert_eq!(special, None);
        assert_eq!(check_output(dir.path(), OutputLimit { bytes: 1024, entries: 4 }), Ok(()));
        let failure = check_output(dir.path(), OutputLimit { bytes: 1023, entries: 4 }).unwrap_err();
        assert_eq!(failure.kind, FailureKind::OutputTooLarge);
        let failure = check_output(dir.path(), OutputLimit { bytes: 1024, entries: 3 }).unwrap_err();
        assert_eq!(
            failure.message,
            "the output grew past its cap of 3 files and directories (4 found so far); nothing was published"
        );
    }

    #[test]
    fn a_sparse_file_counts_its_apparent_size() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::File::create(dir.path().join("sparse")).unwrap().set_len(1 << 40).unwrap();
        let failure = check_output(dir.path(), OutputLimit { bytes: 1 << 30, entries: 10 }).unwrap_err();
        assert_eq!(failure.kind, FailureKind::OutputTooLarge);
        assert!(failure.message.starts_with("the output grew past its cap of 1024.0 MiB"), "{}", failure.message);
    }

    #[test]
    fn measurements_are_spaced_by_their_duration_but_at_most_a_second_apart() {
        assert_eq!(wait_after(Duration::ZERO), FIRST_MEASUREMENT);
        assert_eq!(wait_after(Duration::from_millis(2)), Duration::from_millis(40));
        // A walk of tenths of a second (~100,000 entries) must not space
        // measurements seconds apart: the overshoot is what is written meanwhile.
        assert_eq!(wait_after(Duration::from_millis(300)), Duration::from_secs(1));
        assert_eq!(wait_after(Duration::from_secs(3600)), Duration::from_secs(1));
    }

    #[test]
    fn a_symlink_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link")).unwrap();
        let failure = check_output(dir.path(), ROOMY).unwrap_err();
        assert_eq!(failure.kind, FailureKind::MalformedResult);
        assert!(failure.message.ends_with("link, which is not a regular file or directory"), "{}", failure.message);
    }
}
