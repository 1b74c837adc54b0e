//! What a transformation may leave behind: a bounded list of counters, and
//! an output directory of plain files and directories only.

use std::path::Path;

use super::{Failure, FailureKind};

/// Most counters a transformation may report, and the longest name.
const COUNTER_LIMIT: usize = 64;
const COUNTER_NAME_LIMIT: usize = 128;

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

/// The output may hold only directories and regular files: a symlink left
/// by the guest would point readers of the published data anywhere.
pub(super) fn check_plain_files(dir: &Path) -> Result<(), Failure> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Failure::new(FailureKind::Retryable, format!("cannot read the output {}: {e}", dir.display())))?;
    for entry in entries {
        let entry = entry.map_err(|e| Failure::new(FailureKind::Retryable, format!("cannot read the output: {e}")))?;
        let kind = entry.file_type().map_err(|e| Failure::new(FailureKind::Retryable, e.to_string()))?;
        if kind.is_dir() {
            check_plain_files(&entry.path())?;
        } else if !kind.is_file() {
            return Err(Failure::new(
                FailureKind::MalformedResult,
                format!("the output holds {}, which is not a regular file or directory", entry.path().display()),
            ));
        }
    }
    Ok(())
}
