//! The state of one plugin store: WASI restricted to what the call was
//! granted, the memory limiter, the deadline, captured output, and the
//! `host` interface that plugins import.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime::{Engine, Store, UpdateDeadline};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::Error;
use super::bindings::{LogLevel, host};
use super::capture::{CaptureStream, Captured};
use super::limits::{CAPTURE_LIMIT, Limits, MemoryLimiter};

/// A directory made visible to the guest.
#[derive(Debug, Clone)]
pub(crate) struct Grant {
    pub host: PathBuf,
    pub guest: String,
    pub writable: bool,
}

/// Longest log message or panic report kept from a guest.
const MESSAGE_LIMIT: usize = 16 << 10;

pub(crate) struct Sandbox {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) deadline: Instant,
    plugin: Arc<str>,
    pub(crate) panic: Option<String>,
    stdout: CaptureStream,
    stderr: CaptureStream,
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
        let sandbox = Sandbox {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            limiter: MemoryLimiter::new(limits.memory),
            deadline: Instant::now() + limits.deadline,
            plugin,
            panic: None,
            stdout,
            stderr,
        };
        let mut store = Store::new(engine, sandbox);
        store.limiter(|sandbox| &mut sandbox.limiter);
        // The engine's epoch ticks every EPOCH_TICK; at each tick the guest
        // yields to tokio, and once past its deadline it is interrupted.
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|context| {
            if Instant::now() >= context.data().deadline {
                Ok(UpdateDeadline::Interrupt)
            } else {
                Ok(UpdateDeadline::Yield(1))
            }
        });
        Ok(store)
    }

    pub(crate) fn take_output(&self) -> (Captured, Captured) {
        (self.stdout.take(), self.stderr.take())
    }

    pub(crate) fn plugin(&self) -> &str {
        &self.plugin
    }
}

impl WasiView for Sandbox {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

fn bounded(mut message: String) -> String {
    if message.len() > MESSAGE_LIMIT {
        let mut end = MESSAGE_LIMIT;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push_str("… (truncated)");
    }
    message
}

impl host::Host for Sandbox {
    fn log(&mut self, level: LogLevel, message: String) {
        let message = bounded(message);
        let plugin = &*self.plugin;
        match level {
            LogLevel::Trace => tracing::trace!(target: "trellis::plugin", plugin, "{message}"),
            LogLevel::Debug => tracing::debug!(target: "trellis::plugin", plugin, "{message}"),
            LogLevel::Info => tracing::info!(target: "trellis::plugin", plugin, "{message}"),
            LogLevel::Warn => tracing::warn!(target: "trellis::plugin", plugin, "{message}"),
            LogLevel::Error => tracing::error!(target: "trellis::plugin", plugin, "{message}"),
        }
    }

    fn report_panic(&mut self, message: String) {
        self.panic = Some(bounded(message));
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
