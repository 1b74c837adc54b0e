//! Hostile fixture: a listener that misbehaves on demand, for the tests of
//! the host's listener supervision.
//!
//! Configuration (all optional):
//! - `behaviour`: `ok` (default), `trap`, `fatal`, `retryable`, `sleep`
//!   (a host-side wait, using no CPU), `spin` (a loop that never ends, using
//!   CPU), `trap-on-start` or `fatal-on-start`;
//! - `k`: the misbehaviour applies to transitions whose `sequence % k == 0`
//!   (default 1; gap events never misbehave);
//! - `sleep_ms`: how long `sleep` sleeps (default 5000);
//! - `gate`: a guest path (e.g. `/state/GO`): those transitions first wait
//!   until a file exists there (without using CPU), so that a test decides
//!   when the listener may go on;
//! - `record`: guest path of the record file (default `/state/received.jsonl`).
//!
//! Every start appends `{"start":true}` to the record file, and every event,
//! before anything else, `{"sequence":N,"view":"...","current":"..."}` or
//! `{"gap":[first,last]}`, so that the tests can see what reached the guest
//! even when it then traps.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::time::Duration;

use trellis_plugin_sdk::{Config, ConfigKey, Event, Listener, ListenerError, PluginInfo, export_listener};

/// Where `retryable` remembers the sequences it failed, one per line, so that
/// the replay after the restart succeeds.
const FAILED_ONCE: &str = "/state/failed-once";

#[derive(Clone, Copy)]
enum Behaviour {
    Ok,
    Trap,
    Fatal,
    Retryable,
    Sleep,
    Spin,
    TrapOnStart,
    FatalOnStart,
}

struct Hostile {
    behaviour: Behaviour,
    k: u64,
    sleep_ms: u64,
    gate: Option<String>,
    record: File,
    record_path: String,
}

impl Listener for Hostile {
    fn describe() -> PluginInfo {
        PluginInfo::new("hostile-listener", "0.0.0")
            .config_key(ConfigKey::optional(
                "behaviour",
                "ok, trap, fatal, retryable, sleep, spin, trap-on-start or fatal-on-start",
            ))
            .config_key(ConfigKey::optional("k", "misbehave on transitions whose sequence % k == 0 (default 1)"))
            .config_key(ConfigKey::optional("sleep_ms", "how long `sleep` sleeps (default 5000)"))
            .config_key(ConfigKey::optional("gate", "a guest path: those transitions first wait until it exists"))
            .config_key(ConfigKey::optional("record", "guest path of the record file (default /state/received.jsonl)"))
    }

    fn start(config: Config<'_>) -> Result<Self, ListenerError> {
        let behaviour = match config.get("behaviour").unwrap_or("ok") {
            "ok" => Behaviour::Ok,
            "trap" => Behaviour::Trap,
            "fatal" => Behaviour::Fatal,
            "retryable" => Behaviour::Retryable,
            "sleep" => Behaviour::Sleep,
            "spin" => Behaviour::Spin,
            "trap-on-start" => Behaviour::TrapOnStart,
            "fatal-on-start" => Behaviour::FatalOnStart,
            other => return Err(ListenerError::fatal(format!("unknown behaviour `{other}`"))),
        };
        let k = number(config, "k", 1)?;
        if k == 0 {
            return Err(ListenerError::fatal("`k` must be at least 1"));
        }
        let sleep_ms = number(config, "sleep_ms", 5000)?;
        let record_path = config.get("record").unwrap_or("/state/received.jsonl").to_string();
        let record = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&record_path)
            .map_err(|e| ListenerError::fatal(format!("cannot open {record_path}: {e}")))?;
        let gate = config.get("gate").map(String::from);
        let mut hostile = Hostile { behaviour, k, sleep_ms, gate, record, record_path };
        hostile.append(r#"{"start":true}"#)?;
        match behaviour {
            Behaviour::TrapOnStart => trap(),
            Behaviour::FatalOnStart => Err(ListenerError::fatal("refusing to start")),
            _ => Ok(hostile),
        }
    }

    fn on_event(&mut self, event: Event) -> Result<(), ListenerError> {
        let sequence = match &event {
            Event::Transition(t) => {
                let view = serde_json::to_string(&t.view).expect("a string always serializes");
                let current = t.current.as_str();
                self.append(&format!(r#"{{"sequence":{},"view":{view},"current":"{current}"}}"#, t.sequence))?;
                t.sequence
            }
            Event::Gap(gap) => {
                return self.append(&format!(r#"{{"gap":[{},{}]}}"#, gap.first_sequence, gap.last_sequence));
            }
        };
        if sequence % self.k != 0 {
            return Ok(());
        }
        if let Some(gate) = &self.gate {
            while !std::path::Path::new(gate).exists() {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        match self.behaviour {
            Behaviour::Trap => trap(),
            Behaviour::Fatal => Err(ListenerError::fatal(format!("fatal at {sequence}"))),
            Behaviour::Retryable if !failed_before(sequence)? => {
                Err(ListenerError::retryable(format!("retryable at {sequence}")))
            }
            Behaviour::Sleep => {
                // Not interruptible from inside: the host's deadline has to stop it.
                std::thread::sleep(Duration::from_millis(self.sleep_ms));
                Ok(())
            }
            Behaviour::Spin => {
                // Uses CPU until the host's deadline stops it.
                let mut n = 0u64;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            _ => Ok(()),
        }
    }
}

export_listener!(Hostile);

impl Hostile {
    /// Appends one line to the record file and flushes it, so that it is there
    /// even if the instance traps right after.
    fn append(&mut self, line: &str) -> Result<(), ListenerError> {
        self.record
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|()| self.record.flush())
            .map_err(|e| ListenerError::fatal(format!("cannot append to {}: {e}", self.record_path)))
    }
}

/// The value of the integer key `key`, or `default` if it is not set.
fn number(config: Config<'_>, key: &str, default: u64) -> Result<u64, ListenerError> {
    config.get(key).map_or(Ok(default), |value| {
        value
            .parse()
            .map_err(|_| ListenerError::fatal(format!("`{key}` must be a non-negative integer, not `{value}`")))
    })
}

/// Whether `sequence` failed before; if not, remembers that it fails now.
fn failed_before(sequence: u64) -> Result<bool, ListenerError> {
    let failed = match std::fs::read_to_string(FAILED_ONCE) {
        Ok(text) => text,
        Err(e) if e.kind() == ErrorKind::NotFound => String::new(),
        Err(e) => return Err(ListenerError::fatal(format!("cannot read {FAILED_ONCE}: {e}"))),
    };
    if failed.lines().any(|line| line.trim().parse() == Ok(sequence)) {
        return Ok(true);
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(FAILED_ONCE)
        .and_then(|mut file| file.write_all(format!("{sequence}\n").as_bytes()))
        .map_err(|e| ListenerError::fatal(format!("cannot append to {FAILED_ONCE}: {e}")))?;
    Ok(false)
}

/// Ends the instance with a WebAssembly trap, as a guest bug would.
fn trap() -> ! {
    #[cfg(target_arch = "wasm32")]
    core::arch::wasm32::unreachable();
    #[cfg(not(target_arch = "wasm32"))]
    std::process::abort();
}
