//! What went wrong in a call, as a value: a [`Failure`] of some
//! [`FailureKind`], classified from the trap, the limiter's refusal or the
//! guest's panic report, and the [`CallReport`] that carries it.

use std::time::{Duration, Instant};

use wasmtime::{Store, Trap};

use super::limits::{CPU_WALL_CEILING, Clock};
use super::sandbox::{self, Sandbox};
use super::{Captured, Limits};

/// Why a call did not produce a result. A value, not an error: the
/// scheduler decides what to do with it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Failure {
    pub kind: FailureKind,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// The plugin returned a retryable failure.
    Retryable,
    /// The plugin returned a fatal failure.
    Fatal,
    /// The deadline passed.
    Timeout,
    /// The output grew past its cap of bytes or entries.
    OutputTooLarge,
    /// The memory cap was hit.
    MemoryExhausted,
    /// The plugin panicked.
    Panic,
    /// The plugin's stack overflowed.
    StackOverflow,
    /// Any other trap, including aborts and exits.
    Trap,
    /// The plugin returned a value the contract does not allow.
    MalformedResult,
    /// The component could not be instantiated.
    Instantiation,
    /// The plugin was asked for something its world does not offer.
    Unsupported,
}

impl Failure {
    pub(super) fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Failure { kind, message: message.into() }
    }

    /// Whether trying again may help, by default: a failure the plugin
    /// declared retryable and a deadline passed may be transient. A panic,
    /// a trap (an exit or abort included), a stack overflow or the memory
    /// cap are what the same input gives again (see [`Failure::is_crash`]);
    /// fatal and malformed results, instantiation and an output over its
    /// cap (which would only fill the disk again) never change.
    pub fn is_retryable(&self) -> bool {
        matches!(self.kind, FailureKind::Retryable | FailureKind::Timeout)
    }

    /// The plugin crashed (panic, trap, exit, stack overflow): retried only
    /// where a view type opts in with `retry_panics`.
    pub fn is_crash(&self) -> bool {
        matches!(self.kind, FailureKind::Panic | FailureKind::Trap | FailureKind::StackOverflow)
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Everything known about one call.
#[derive(Debug, Clone)]
pub struct CallReport<T> {
    pub result: Result<T, Failure>,
    pub elapsed: Duration,
    /// CPU time the call used on the threads that ran it.
    pub cpu: Duration,
    /// Peak linear memory in bytes, summed over memories.
    pub peak_memory: usize,
    pub stdout: Captured,
    pub stderr: Captured,
    /// What the guest logged through the host, within its log budget.
    pub log: Vec<super::sandbox::LogLine>,
}

impl<T> CallReport<T> {
    /// The same report with what the call returned made into another value.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> CallReport<U> {
        let CallReport { result, elapsed, cpu, peak_memory, stdout, stderr, log } = self;
        CallReport { result: result.map(f), elapsed, cpu, peak_memory, stdout, stderr, log }
    }
}

/// Which phase of a call failed, for classification.
pub(super) enum Phase {
    Instantiate(wasmtime::Error),
    Call(wasmtime::Error),
    /// The host stopped the call for a reason of its own (its output grew
    /// past the cap).
    Stopped(Failure),
}

/// Makes one call of the guest in `store` and reports it. The store's
/// deadline interrupts a running guest; at [`Limits::wall_limit`] the call
/// is abandoned from outside, for a guest blocked in a host call. Every
/// poll of the call is metered for its CPU time, which is what a deadline
/// of [`Clock::Cpu`] counts.
pub(super) async fn run<R, T>(
    store: &mut Store<Sandbox>,
    limits: Limits,
    call: impl AsyncFnOnce(&mut Store<Sandbox>) -> Result<R, Phase>,
    convert: impl FnOnce(R) -> Result<T, Failure>,
) -> CallReport<T> {
    let _ticking = super::engine::Ticking::start();
    let started = Instant::now();
    let meter = store.data_mut().arm(limits);
    let result = tokio::time::timeout(limits.wall_limit(), meter.meter(call(store))).await;
    report(store, started, limits, result, convert)
}

/// Turns the raw result of a call into a report: classifies failures,
/// collects captured output and logs it.
fn report<R, T>(
    store: &mut Store<Sandbox>,
    started: Instant,
    limits: Limits,
    result: Result<Result<R, Phase>, tokio::time::error::Elapsed>,
    convert: impl FnOnce(R) -> Result<T, Failure>,
) -> CallReport<T> {
    let sandbox = store.data();
    let result = match result {
        Ok(Ok(returned)) => convert(returned),
        Ok(Err(phase)) => Err(classify(sandbox, limits, phase)),
        Err(_elapsed) => Err(abandoned(limits)),
    }
    .map_err(|failure| Failure { message: sandbox::bounded(failure.message), ..failure });
    let (stdout, stderr) = sandbox.take_output();
    let plugin = sandbox.plugin();
    if sandbox.dropped_log_messages > 0 {
        tracing::warn!(target: "trellis::plugin", plugin, dropped = sandbox.dropped_log_messages, "log budget exhausted; messages dropped");
    }
    for (stream, captured) in [("stdout", &stdout), ("stderr", &stderr)] {
        if !captured.text.is_empty() {
            tracing::info!(target: "trellis::plugin", plugin, stream, truncated_bytes = captured.truncated_bytes, "{}", captured.text.trim_end());
        }
    }
    let (elapsed, cpu, peak_memory) = (started.elapsed(), sandbox.cpu_used(), sandbox.limiter.peak());
    let log = store.data_mut().take_log();
    CallReport { result, elapsed, cpu, peak_memory, stdout, stderr, log }
}

/// The guest was interrupted at its deadline.
fn timeout(limits: Limits) -> Failure {
    let message = match limits.clock {
        Clock::Wall => format!("deadline of {:?} exceeded", limits.deadline),
        Clock::Cpu => format!("CPU-time deadline of {:?} exceeded", limits.deadline),
    };
    Failure::new(FailureKind::Timeout, message)
}

/// The call was abandoned from outside: the guest did not return in time,
/// most likely blocked in a host call.
fn abandoned(limits: Limits) -> Failure {
    match limits.clock {
        Clock::Wall => timeout(limits),
        Clock::Cpu => Failure::new(
            FailureKind::Timeout,
            format!(
                "took more than {:?} of wall-clock time ({CPU_WALL_CEILING} times its CPU-time deadline of {:?}), \
                 blocked in a host call",
                limits.wall_limit(),
                limits.deadline
            ),
        ),
    }
}

fn classify(sandbox: &Sandbox, limits: Limits, phase: Phase) -> Failure {
    let panic = sandbox.panic.as_deref().map(|message| format!("panicked: {message}"));
    // The limiter's refusal explains whatever trap followed it: a Rust guest
    // aborts when an allocation fails, or panics if it used try_reserve.
    if let Some(asked) = sandbox.limiter.refused {
        let mut message =
            format!("memory cap of {} MiB exceeded (asked for {} MiB)", limits.memory >> 20, asked.div_ceil(1 << 20));
        if let Some(panic) = panic {
            message = format!("{message}; then {panic}");
        }
        return Failure::new(FailureKind::MemoryExhausted, message);
    }
    let (error, instantiating) = match phase {
        Phase::Instantiate(error) => (error, true),
        Phase::Call(error) => (error, false),
        Phase::Stopped(failure) => return failure,
    };
    if let Some(trap) = error.downcast_ref::<Trap>() {
        return match trap {
            Trap::Interrupt => timeout(limits),
            Trap::StackOverflow => Failure::new(FailureKind::StackOverflow, "stack overflow"),
            _ if panic.is_some() => Failure::new(FailureKind::Panic, panic.unwrap_or_default()),
            Trap::UnreachableCodeReached => Failure::new(FailureKind::Trap, "aborted (wasm `unreachable`)"),
            Trap::MemoryOutOfBounds => Failure::new(
                FailureKind::Trap,
                // Rust and C guests keep a shadow stack in linear memory;
                // overflowing it shows up as this trap, so say so.
                "trapped: out of bounds memory access (a guest whose shadow stack overflows also ends here)",
            ),
            other => Failure::new(FailureKind::Trap, format!("trapped: {other}")),
        };
    }
    if let Some(exit) = error.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return Failure::new(FailureKind::Trap, format!("exited with status {}", exit.0));
    }
    if instantiating {
        return Failure::new(FailureKind::Instantiation, format!("cannot instantiate: {error:#}"));
    }
    // The call returned, but what crossed the boundary was refused: its
    // result could not be lifted (bad UTF-8, bad discriminant, out-of-bounds
    // pointer), or a host call's arguments were over their limits.
    Failure::new(FailureKind::MalformedResult, format!("malformed result: {error:#}"))
}
