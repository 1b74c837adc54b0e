//! Files next to the metastore in which a process says what it does with
//! the project: a running `materialize` names its run (`<metastore>.active-run`),
//! `serve` its address (`<metastore>.server`). sled lets one process open
//! the metastore; these let the others find out who has it and reach it.
//! Each names its process by pid and start time, so a pid reused by
//! another process is never taken for it.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::catalog::Catalog;

/// What a file holds: the announcement, and the process that made it.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct Announced<T> {
    #[serde(flatten)]
    pub what: T,
    pub pid: u32,
    /// When the process started (Linux: clock ticks after boot).
    started: Option<u64>,
}

impl<T> Announced<T> {
    /// Whether the announcing process still runs (a zombie does not).
    pub(super) fn is_alive(&self) -> bool {
        match std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) {
            Ok(stat) => {
                let (state, started) = stat_fields(&stat);
                state != Some('Z') && (self.started.is_none() || started == self.started)
            }
            // Without /proc, the pid alone.
            // SAFETY: signal 0 only checks that the process exists.
            Err(_) => !Path::new("/proc/self").exists() && unsafe { libc::kill(self.pid as libc::pid_t, 0) } == 0,
        }
    }
}

/// `<metastore><suffix>`.
pub(super) fn path(catalog: &Catalog, suffix: &str) -> PathBuf {
    beside(&catalog.settings.metastore, suffix)
}

/// `<metastore><suffix>`, for a metastore at `metastore`.
fn beside(metastore: &Path, suffix: &str) -> PathBuf {
    let mut path = metastore.as_os_str().to_owned();
    path.push(suffix);
    PathBuf::from(path)
}

/// Writes `what` for this process into `file`, whole or not at all.
pub(super) fn write<T: Serialize>(file: &Path, what: T) -> std::io::Result<()> {
    let pid = std::process::id();
    let record = Announced { what, pid, started: process_start(pid) };
    let mut temporary = file.as_os_str().to_owned();
    temporary.push(".tmp");
    let bytes = serde_json::to_vec(&record).map_err(std::io::Error::other)?;
    std::fs::write(&temporary, bytes)?;
    std::fs::rename(&temporary, file)
}

/// What `file` announces, if its process still runs.
pub(super) fn read<T: DeserializeOwned>(file: &Path) -> Option<Announced<T>> {
    let announced: Announced<T> = serde_json::from_slice(&std::fs::read(file).ok()?).ok()?;
    announced.is_alive().then_some(announced)
}

/// Removes an announcement when what it announced is over.
pub(super) struct Guard(pub PathBuf);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A process's start time from /proc, in clock ticks after boot.
fn process_start(pid: u32) -> Option<u64> {
    stat_fields(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?).1
}

/// The state (field 3) and start time (field 22) of a /proc/PID/stat line;
/// the command name (field 2) may hold spaces and parentheses, so fields
/// are counted after its last `)`.
fn stat_fields(stat: &str) -> (Option<char>, Option<u64>) {
    let Some((_, rest)) = stat.rsplit_once(')') else { return (None, None) };
    let mut fields = rest.split_whitespace();
    let state = fields.next().and_then(|s| s.chars().next());
    let started = fields.nth(18).and_then(|s| s.parse().ok());
    (state, started)
}

/// The address a `trellis serve` announces.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct ServerAddress {
    pub url: String,
}

pub(super) const SERVER_SUFFIX: &str = ".server";

/// The server that holds the project, if one announced itself and runs.
pub(super) fn server(catalog: &Catalog) -> Option<Announced<ServerAddress>> {
    server_of(&catalog.settings.metastore)
}

/// The server that holds the metastore at `metastore`, if one announced
/// itself and runs.
pub(super) fn server_of(metastore: &Path) -> Option<Announced<ServerAddress>> {
    read(&beside(metastore, SERVER_SUFFIX))
}

/// One line saying that `server` holds the project in `dir`, and how to
/// reach it: `trellis COMMAND --server URL`, or for `serve` itself, that
/// it already runs.
pub(super) fn held_by_server(dir: &Path, server: &Announced<ServerAddress>, command: &str) -> String {
    let url = &server.what.url;
    let held = format!("`trellis serve` at {url} (process {}) holds the project in {}", server.pid, dir.display());
    match command {
        "serve" => format!("{held}: talk to it with --server {url} (or TRELLIS_SERVER={url}), or stop it first"),
        "coordinate" => format!(
            "{held}: it runs the coordinators itself (`trellis coordinators --server {url}`); stop it to coordinate here"
        ),
        "metastore" => format!("{held}: stop it first; `trellis metastore` needs the metastore to itself"),
        _ => format!("{held}: run `trellis {command} --server {url}` (or set TRELLIS_SERVER={url})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_announcement_is_read_back_while_its_process_runs() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("metastore.server");
        write(&file, ServerAddress { url: "http://127.0.0.1:1".into() }).unwrap();
        let announced: Announced<ServerAddress> = read(&file).expect("this process runs");
        assert_eq!((announced.what.url.as_str(), announced.pid), ("http://127.0.0.1:1", std::process::id()));
        // A process that once had this pid started at another time.
        let stale = format!(r#"{{"url":"http://127.0.0.1:1","pid":{},"started":1}}"#, std::process::id());
        std::fs::write(&file, stale).unwrap();
        assert!(read::<ServerAddress>(&file).is_none());
    }
}
