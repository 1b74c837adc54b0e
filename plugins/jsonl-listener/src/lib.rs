//! `jsonl-listener`: appends every scheduling event as one JSON line to a
//! file in the listener's own state directory.
//!
//! Configuration: `file`, the file's guest path, default
//! `/state/events.jsonl` (`/state` is the directory trellis grants a listener).
//! A failed write is retryable: trellis restarts the listener and replays the
//! latest event of every view.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};

use serde_json::json;
use trellis_plugin_sdk::{Config, ConfigKey, Event, Listener, ListenerError, PluginInfo, export_listener};

struct JsonlListener {
    file: File,
    path: String,
}

impl Listener for JsonlListener {
    fn describe() -> PluginInfo {
        PluginInfo::new("jsonl-listener", env!("CARGO_PKG_VERSION"))
            .description("appends every scheduling event as a JSON line to a file")
            .config_key(ConfigKey::optional("file", "guest path of the file (default /state/events.jsonl)"))
    }

    fn start(config: Config<'_>) -> Result<Self, ListenerError> {
        let path = config.get("file").unwrap_or("/state/events.jsonl").to_string();
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&path)
            .map_err(|e| ListenerError::fatal(format!("cannot open {path}: {e}")))?;
        terminate_last_line(&mut file).map_err(|e| ListenerError::fatal(format!("cannot repair {path}: {e}")))?;
        Ok(JsonlListener { file, path })
    }

    fn on_event(&mut self, event: Event) -> Result<(), ListenerError> {
        let line = match event {
            Event::Transition(t) => json!({
                "sequence": t.sequence,
                "view": t.view,
                "previous": t.previous.as_str(),
                "current": t.current.as_str(),
                "actions": t.actions,
                "time": t.time,
                "run_id": t.run_id,
                "error": t.error,
            }),
            Event::Gap(gap) => json!({
                "gap": { "first_sequence": gap.first_sequence, "last_sequence": gap.last_sequence },
            }),
        };
        // One write per event: a failure cannot leave half a line behind
        // for the next event to continue.
        self.file
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|()| self.file.flush())
            .map_err(|e| ListenerError::retryable(format!("cannot append to {}: {e}", self.path)))
    }
}

export_listener!(JsonlListener);

/// If an earlier instance died mid-line, ends that line, so that the next
/// event starts a line of its own.
fn terminate_last_line(file: &mut File) -> std::io::Result<()> {
    let length = file.metadata()?.len();
    if length == 0 {
        return Ok(());
    }
    file.seek(SeekFrom::Start(length - 1))?;
    let mut last = [0u8];
    file.read_exact(&mut last)?;
    if last[0] != b'\n' {
        file.write_all(b"\n")?;
    }
    Ok(())
}
