//! `stats-listener`: keeps counts per state and transformation durations in a
//! JSON file in the listener's own state directory.
//!
//! Configuration: `file`, the file's guest path, default `/state/stats.json`
//! (`/state` is the directory trellis grants a listener). The file holds
//! everything the listener knows, including transformations still running, so
//! a fresh instance continues where the last one stopped. It is rewritten
//! atomically after every event; a failed write is retryable: trellis restarts
//! the listener, which reloads the file and is replayed the events it missed.

mod stats;

use std::fs::File;
use std::io::{ErrorKind, Write};

use trellis_plugin_sdk::{Config, ConfigKey, Event, Listener, ListenerError, PluginInfo, export_listener};

use stats::Stats;

struct StatsListener {
    path: String,
    stats: Stats,
}

impl Listener for StatsListener {
    fn describe() -> PluginInfo {
        PluginInfo::new("stats-listener", env!("CARGO_PKG_VERSION"))
            .description("counts events per state and measures transformation durations, in a JSON file")
            .config_key(ConfigKey::optional("file", "guest path of the file (default /state/stats.json)"))
    }

    fn start(config: Config<'_>) -> Result<Self, ListenerError> {
        let path = config.get("file").unwrap_or("/state/stats.json").to_string();
        let stats = load(&path)?;
        Ok(StatsListener { path, stats })
    }

    fn on_event(&mut self, event: Event) -> Result<(), ListenerError> {
        // If the save fails, the host discards this instance together with the
        // in-memory change, and the next one starts again from the file.
        self.stats.apply(&event);
        save(&self.path, &self.stats)
    }
}

export_listener!(StatsListener);

/// The statistics saved at `path`, or empty ones if there is no file yet.
fn load(path: &str) -> Result<Stats, ListenerError> {
    match std::fs::read(path) {
        Ok(bytes) => {
            serde_json::from_slice(&bytes).map_err(|e| ListenerError::fatal(format!("{path} is corrupt: {e}")))
        }
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(Stats::default()),
        Err(e) => Err(ListenerError::fatal(format!("cannot read {path}: {e}"))),
    }
}

/// Writes `<path>.tmp` and renames it over `path`, so that a crash leaves
/// either the old file or the new one, never half of one.
fn save(path: &str, stats: &Stats) -> Result<(), ListenerError> {
    let tmp = format!("{path}.tmp");
    let mut json = serde_json::to_vec_pretty(stats).expect("statistics always serialize");
    json.push(b'\n');
    // Synced before the rename: otherwise a machine crash could persist the
    // rename but not the data, and leave an empty file behind.
    File::create(&tmp)
        .and_then(|mut file| file.write_all(&json).and_then(|()| file.sync_all()))
        .map_err(|e| ListenerError::retryable(format!("cannot write {tmp}: {e}")))?;
    std::fs::rename(&tmp, path).map_err(|e| ListenerError::retryable(format!("cannot rename {tmp} to {path}: {e}")))
}
