//! The CPU time a call itself uses: every poll of the call's future (the
//! guest runs inside those polls, on the polling thread) timed with that
//! thread's CPU clock, so that time spent waiting for a CPU, or blocked in a
//! host call, does not count.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// `poll_started` when no poll is in progress.
const NOT_POLLING: u64 = u64::MAX;

/// The CPU time used by the polls of one call, shared by the call's
/// future (which adds each poll's time) and the store's epoch callback
/// (which runs inside a poll and adds the poll so far).
#[derive(Debug, Default)]
pub(crate) struct CpuMeter {
    /// Nanoseconds of CPU time of the polls that ended.
    used: AtomicU64,
    /// The polling thread's CPU clock, in nanoseconds, when the poll in
    /// progress started; [`NOT_POLLING`] between polls.
    poll_started: AtomicU64,
}

impl CpuMeter {
    pub(crate) fn new() -> Arc<CpuMeter> {
        Arc::new(CpuMeter { used: AtomicU64::new(0), poll_started: AtomicU64::new(NOT_POLLING) })
    }

    /// Starts counting from zero, for the next call on the same store.
    pub(crate) fn reset(&self) {
        self.used.store(0, Ordering::Relaxed);
    }

    /// The CPU time of the polls that ended.
    pub(crate) fn used(&self) -> Duration {
        Duration::from_nanos(self.used.load(Ordering::Relaxed))
    }

    /// The CPU time used so far, the poll in progress included. Only
    /// meaningful on the thread that polls, which is where the epoch
    /// callback runs.
    pub(crate) fn used_in_poll(&self) -> Duration {
        let used = self.used.load(Ordering::Relaxed);
        let started = self.poll_started.load(Ordering::Relaxed);
        let current = if started == NOT_POLLING { 0 } else { thread_cpu_nanos().saturating_sub(started) };
        Duration::from_nanos(used.saturating_add(current))
    }

    /// `future`, with the CPU time of each of its polls added to this meter.
    pub(crate) async fn meter<F: Future>(&self, future: F) -> F::Output {
        let mut future = pin!(future);
        std::future::poll_fn(|context| {
            let started = thread_cpu_nanos();
            self.poll_started.store(started, Ordering::Relaxed);
            let polled = future.as_mut().poll(context);
            self.poll_started.store(NOT_POLLING, Ordering::Relaxed);
            self.used.fetch_add(thread_cpu_nanos().saturating_sub(started), Ordering::Relaxed);
            polled
        })
        .await
    }
}

/// The calling thread's CPU time in nanoseconds (user and system).
#[cfg(unix)]
fn thread_cpu_nanos() -> u64 {
    let mut time = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec, which lives on this stack.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time) };
    if status != 0 {
        return 0;
    }
    (time.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(time.tv_nsec as u64)
}

/// Without a thread CPU clock, wall-clock time stands in for it.
#[cfg(not(unix))]
fn thread_cpu_nanos() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spin(duration: Duration) {
        let started = thread_cpu_nanos();
        while thread_cpu_nanos() - started < duration.as_nanos() as u64 {
            std::hint::black_box(());
        }
    }

    #[tokio::test]
    async fn polls_are_counted_and_waits_are_not() {
        let meter = CpuMeter::new();
        meter
            .meter(async {
                spin(Duration::from_millis(30));
                // A wait of wall-clock time outside any poll: not CPU time.
                tokio::time::sleep(Duration::from_millis(200)).await;
                spin(Duration::from_millis(30));
            })
            .await;
        let used = meter.used();
        assert!(used >= Duration::from_millis(60), "{used:?}");
        // Less than the sleep alone: had it been counted, at least 260 ms.
        assert!(used < Duration::from_millis(200), "the sleep was counted: {used:?}");
        meter.reset();
        assert_eq!(meter.used(), Duration::ZERO);
    }

    #[tokio::test]
    async fn the_poll_in_progress_is_seen_from_inside_it() {
        let meter = CpuMeter::new();
        let inside = meter
            .meter(async {
                spin(Duration::from_millis(20));
                meter.used_in_poll()
            })
            .await;
        assert!(inside >= Duration::from_millis(20), "{inside:?}");
        assert_eq!(meter.used_in_poll(), meter.used(), "between polls nothing is in progress");
    }
}
