//! The state of one plugin store: WASI restricted to what the call was
//! granted (the grants, where the guest sees them, and the refusal of
//! overlapping ones), the memory limiter and the store's reservation from
//! the memory budget, the deadline (of wall-clock or of CPU time), captured
//! output, and the `host` interface that plugins import.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::OwnedSemaphorePermit;
use wasmtime::component::ResourceTable;
use wasmtime::{Engine, Store, UpdateDeadline};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::Error;
use super::bindings::{LogLevel, host};
use super::budget::Reservation;
use super::capture::{CaptureStream, Captured};
use super::cpu::CpuMeter;
use super::http::HttpGrant;
use super::limits::{CAPTURE_LIMIT, Clock, Limits, MemoryLimiter};
use crate::model::AllowedHost;

/// A directory made visible to the guest.
#[derive(Debug, Clone)]
pub(crate) struct Grant {
    pub host: PathBuf,
    pub guest: String,
    pub writable: bool,
}

/// The guest path of a transformation's output directory.
pub const GUEST_OUTPUT: &str = "/output";
/// The guest path of an incremental view's previous output, read-only.
pub const GUEST_PREVIOUS: &str = "/previous";
/// The guest path of a listener's own state directory.
pub const GUEST_STATE: &str = "/state";

/// The guest path of a transformation's input number `index`.
pub fn guest_input(index: usize) -> String {
    format!("/inputs/{index}")
}

/// Refuses grants where one directory contains another: an input inside
/// the output would become writable, an output inside an input would let a
/// call change its own inputs.
pub(super) fn check_no_overlap(grants: &[Grant]) -> Result<(), Error> {
    let resolved: Vec<PathBuf> = grants
        .iter()
        .map(|grant| {
            crate::storage::grant::resolve(&grant.host)
                .map_err(|e| Error::Grant { path: grant.host.clone(), reason: e.to_string() })
        })
        .collect::<Result<_, _>>()?;
    for (i, a) in resolved.iter().enumerate() {
        for (j, b) in resolved.iter().enumerate() {
            let writable = grants[i].writable || grants[j].writable;
            if i != j && writable && b.starts_with(a) {
                return Err(Error::Grant {
                    path: grants[j].host.clone(),
                    reason: format!("it lies inside {}, and one of them is writable", grants[i].host.display()),
                });
            }
        }
    }
    Ok(())
}

/// Longest log message, panic report or failure message kept from a guest.
pub(crate) const MESSAGE_LIMIT: usize = 16 << 10;

/// Bytes of log messages a store may send to the host log; past it,
/// messages are counted and dropped, like captured output.
const LOG_BUDGET: usize = 256 << 10;

/// Most bytes the guest may pass to the host in one host call. Rust's std
/// writes in 4 KiB chunks; without this, one `log` call could make the host
/// copy 128 MiB (wasmtime's default) before any of our limits applies.
const HOSTCALL_BYTES: usize = 4 << 20;

/// Most handles (open files, streams) a store may hold at once besides
/// its grants' preopened directories (a year-to-date view has 365 inputs).
/// Each open file is a host file descriptor; wasmtime's default is a
/// million.
const HANDLE_LIMIT: usize = 256;

/// One line a guest logged through the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// `trace`, `debug`, `info`, `warn` or `error`.
    pub level: &'static str,
    pub message: String,
}

pub(crate) struct Sandbox {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    /// The hosts it may reach over HTTP: none unless [`Sandbox::allow_http`].
    http_grant: HttpGrant,
    table: ResourceTable,
    pub(crate) limiter: MemoryLimiter,
    /// When the call in progress is interrupted, armed by [`Sandbox::arm`].
    deadline: Deadline,
    /// The CPU time of the call in progress.
    cpu: Arc<CpuMeter>,
    plugin: Arc<str>,
    pub(crate) panic: Option<String>,
    log_budget: usize,
    pub(crate) dropped_log_messages: u64,
    /// What the guest logged during the call in progress, in order.
    logged: Vec<LogLine>,
    stdout: CaptureStream,
    stderr: CaptureStream,
    /// Held for the store's life: one of the runtime's store slots.
    _slot: OwnedSemaphorePermit,
    /// Held for the store's life: its memory cap, reserved from the budget.
    _memory: Reservation,
}

/// The deadline of the call in progress.
#[derive(Debug, Clone, Copy)]
enum Deadline {
    Wall(Instant),
    /// CPU time, as the store's [`CpuMeter`] counts it.
    Cpu(Duration),
}

impl Sandbox {
    /// A store for one call (or one listener instance) of `plugin`.
    /// `deterministic` fixes clocks and random numbers, for checksums.
    pub(crate) fn store(
        engine: &Engine,
        plugin: Arc<str>,
        grants: &[Grant],
        limits: Limits,
        deterministic: bool,
        slot: OwnedSemaphorePermit,
        memory: Reservation,
    ) -> Result<Store<Sandbox>, Error> {
        let stdout = CaptureStream::new(CAPTURE_LIMIT);
        let stderr = CaptureStream::new(CAPTURE_LIMIT);
        // WasiCtxBuilder starts from nothing: no environment, no arguments,
        // no preopens, stdin closed, sockets denied. Only grants are added.
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(stdout.clone()).stderr(stderr.clone());
        wasi.allow_tcp(false).allow_udp(false).allow_ip_name_lookup(false);
        for grant in grants {
            let perms = if grant.writable { FsPerms::ReadWrite } else { FsPerms::ReadOnly };
            wasi.preopened_dir(&grant.host, &grant.guest, perms)
                .map_err(|e| Error::Grant { path: grant.host.clone(), reason: e.to_string() })?;
        }
        if deterministic {
            use wasmtime_wasi::random::Deterministic;
            wasi.wall_clock(FixedClock)
                .monotonic_clock(FixedClock)
                .secure_random(Deterministic::new(vec![0x5e, 0xed]))
                .insecure_random(Deterministic::new(vec![0x5e, 0xed]))
                .insecure_random_seed(0);
        }
        let mut table = ResourceTable::new();
        table.set_max_capacity(HANDLE_LIMIT + grants.len());
        let sandbox = Sandbox {
            wasi: wasi.build(),
            http: WasiHttpCtx::new(),
            http_grant: HttpGrant::new(plugin.clone(), &[]),
            table,
            limiter: MemoryLimiter::new(limits.memory),
            deadline: Deadline::Wall(Instant::now() + limits.clamped().deadline),
            cpu: CpuMeter::new(),
            plugin,
            panic: None,
            log_budget: LOG_BUDGET,
            dropped_log_messages: 0,
            logged: Vec::new(),
            stdout,
            stderr,
            _slot: slot,
            _memory: memory,
        };
        let mut store = Store::new(engine, sandbox);
        store.limiter(|sandbox| &mut sandbox.limiter);
        store.set_hostcall_fuel(HOSTCALL_BYTES);
        // The engine's epoch ticks every EPOCH_TICK while a guest runs; at each tick the guest
        // yields to tokio, and once past its deadline it is interrupted.
        // The callback runs inside the poll that runs the guest, on its
        // thread, where the CPU meter can count the poll in progress.
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|context| {
            if context.data().past_deadline() { Ok(UpdateDeadline::Interrupt) } else { Ok(UpdateDeadline::Yield(1)) }
        });
        Ok(store)
    }

    /// Sets the deadline of the call about to start and resets the CPU
    /// meter; returns the meter, which the call's future feeds.
    pub(crate) fn arm(&mut self, limits: Limits) -> Arc<CpuMeter> {
        let deadline = limits.clamped().deadline;
        self.deadline = match limits.clock {
            Clock::Wall => Deadline::Wall(Instant::now() + deadline),
            Clock::Cpu => Deadline::Cpu(deadline),
        };
        self.cpu.reset();
        self.cpu.clone()
    }

    fn past_deadline(&self) -> bool {
        match self.deadline {
            Deadline::Wall(at) => Instant::now() >= at,
            Deadline::Cpu(budget) => self.cpu.used_in_poll() >= budget,
        }
    }

    /// The CPU time of the last call's polls.
    pub(crate) fn cpu_used(&self) -> Duration {
        self.cpu.used()
    }

    pub(crate) fn take_output(&self) -> (Captured, Captured) {
        (self.stdout.take(), self.stderr.take())
    }

    /// What the guest logged since the last call's report.
    pub(crate) fn take_log(&mut self) -> Vec<LogLine> {
        std::mem::take(&mut self.logged)
    }

    pub(crate) fn plugin(&self) -> &str {
        &self.plugin
    }

    /// Lets the guest send HTTP requests to `hosts`, and to no other.
    pub(crate) fn allow_http(&mut self, hosts: &[AllowedHost]) {
        self.http_grant = HttpGrant::new(self.plugin.clone(), hosts);
    }
}

impl WasiView for Sandbox {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl WasiHttpView for Sandbox {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: &mut self.http_grant }
    }
}

/// `message`, cut at [`MESSAGE_LIMIT`] bytes on a character boundary.
pub(crate) fn bounded(mut message: String) -> String {
    if message.len() > MESSAGE_LIMIT {
        message.truncate(message.floor_char_boundary(MESSAGE_LIMIT));
        message.push_str("… (truncated)");
    }
    message
}

impl host::Host for Sandbox {
    fn log(&mut self, level: LogLevel, message: String) {
        let message = bounded(message);
        if message.len() > self.log_budget {
            self.log_budget = 0;
            self.dropped_log_messages += 1;
            return;
        }
        self.log_budget -= message.len();
        let plugin = &*self.plugin;
        let level = match level {
            LogLevel::Trace => {
                tracing::trace!(target: "trellis::plugin", plugin, "{message}");
                "trace"
            }
            LogLevel::Debug => {
                tracing::debug!(target: "trellis::plugin", plugin, "{message}");
                "debug"
            }
            LogLevel::Info => {
                tracing::info!(target: "trellis::plugin", plugin, "{message}");
                "info"
            }
            LogLevel::Warn => {
                tracing::warn!(target: "trellis::plugin", plugin, "{message}");
                "warn"
            }
            LogLevel::Error => {
                tracing::error!(target: "trellis::plugin", plugin, "{message}");
                "error"
            }
        };
        self.logged.push(LogLine { level, message });
    }

    fn report_panic(&mut self, message: String) {
        let message = bounded(message);
        tracing::error!(target: "trellis::plugin", plugin = &*self.plugin, "panicked: {message}");
        self.panic = Some(message);
    }
}

impl super::bindings::transformation::trellis::plugin::types::Host for Sandbox {}

/// A clock that always says the same: checksums must not depend on time.
struct FixedClock;

impl wasmtime_wasi::HostWallClock for FixedClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl wasmtime_wasi::HostMonotonicClock for FixedClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }

    fn now(&self) -> u64 {
        0
    }
}
