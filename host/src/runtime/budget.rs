//! The memory budget of plugin calls: every store reserves its memory cap
//! from it before it is created and gives it back when it is dropped, so
//! that concurrent calls wait rather than take more host memory than the
//! budget, together.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::Error;

/// Reservations are counted in MiB: a semaphore's permits are `u32`s.
const UNIT: usize = 1 << 20;

/// A budget of memory that stores reserve their cap from. Cheap to clone;
/// clones share the budget.
#[derive(Clone)]
pub struct MemoryBudget {
    inner: Arc<BudgetInner>,
}

struct BudgetInner {
    /// In [`UNIT`]s; fair, so that a large reservation is not passed over
    /// forever by small ones.
    semaphore: Arc<Semaphore>,
    units: usize,
    /// Units held by reservations. Not the semaphore's count: a fair
    /// semaphore hands permits to the first waiter as they come free, so
    /// those are neither available nor reserved yet.
    reserved_units: AtomicUsize,
    waiting: AtomicUsize,
    peak_units: AtomicUsize,
}

/// How a budget is used, as `GET /transformations` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetUsage {
    /// Bytes.
    pub budget: usize,
    /// Bytes reserved by the stores alive now.
    pub reserved: usize,
    /// The most bytes reserved at once so far.
    pub peak_reserved: usize,
    /// Calls waiting for their reservation.
    pub waiting: usize,
}

/// A store's reservation, given back when it is dropped.
pub(crate) struct Reservation {
    _permit: OwnedSemaphorePermit,
    units: usize,
    budget: Arc<BudgetInner>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.reserved_units.fetch_sub(self.units, Ordering::Relaxed);
    }
}

impl MemoryBudget {
    /// A budget of `bytes`, rounded down to whole MiB (at least one).
    pub fn new(bytes: usize) -> MemoryBudget {
        let units = (bytes / UNIT).clamp(1, Semaphore::MAX_PERMITS);
        MemoryBudget {
            inner: Arc::new(BudgetInner {
                semaphore: Arc::new(Semaphore::new(units)),
                units,
                reserved_units: AtomicUsize::new(0),
                waiting: AtomicUsize::new(0),
                peak_units: AtomicUsize::new(0),
            }),
        }
    }

    /// The budget in bytes.
    pub fn bytes(&self) -> usize {
        self.inner.units * UNIT
    }

    /// Whether a cap of `bytes` can ever be reserved.
    pub fn admits(&self, bytes: usize) -> bool {
        units_of(bytes) <= self.inner.units
    }

    /// What a store with a cap of `bytes` takes from a budget while it
    /// lives: the cap in whole MiB, rounded up, at least one.
    pub fn reservation_of(bytes: usize) -> usize {
        units_of(bytes) * UNIT
    }

    pub fn usage(&self) -> BudgetUsage {
        let inner = &self.inner;
        let reserved = inner.reserved_units.load(Ordering::Relaxed);
        BudgetUsage {
            budget: inner.units * UNIT,
            reserved: reserved * UNIT,
            peak_reserved: inner.peak_units.load(Ordering::Relaxed) * UNIT,
            waiting: inner.waiting.load(Ordering::Relaxed),
        }
    }

    /// Reserves `bytes` for `plugin`'s store, waiting while the budget is
    /// taken by others. A cap larger than the whole budget is an error
    /// rather than a wait that would never end.
    pub(crate) async fn reserve(&self, plugin: &str, bytes: usize) -> Result<Reservation, Error> {
        let inner = &self.inner;
        let units = units_of(bytes);
        if units > inner.units {
            return Err(Error::OverBudget { name: plugin.to_string(), memory: bytes, budget: self.bytes() });
        }
        let permits = u32::try_from(units).map_err(|_| Error::Engine("memory reservation too large".into()))?;
        let permit = match inner.semaphore.clone().try_acquire_many_owned(permits) {
            Ok(permit) => permit,
            Err(_) => {
                let _waiting = Waiting::count(&inner.waiting);
                inner
                    .semaphore
                    .clone()
                    .acquire_many_owned(permits)
                    .await
                    .map_err(|_| Error::Engine("the memory budget was closed".into()))?
            }
        };
        let reserved = inner.reserved_units.fetch_add(units, Ordering::Relaxed) + units;
        inner.peak_units.fetch_max(reserved, Ordering::Relaxed);
        Ok(Reservation { _permit: permit, units, budget: self.inner.clone() })
    }
}

fn units_of(bytes: usize) -> usize {
    bytes.div_ceil(UNIT).max(1)
}

/// One call counted as waiting while this lives: counted down however the
/// wait ends, a canceled call's included.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn count(waiting: &'a AtomicUsize) -> Waiting<'a> {
        waiting.fetch_add(1, Ordering::Relaxed);
        Waiting(waiting)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The default budget: half the memory this process may use (the machine's,
/// or its cgroup's limit where that is lower), and at least 1 GiB, so that
/// a default transformation (512 MiB) always fits.
pub fn default_memory_budget() -> usize {
    const FLOOR: usize = 1 << 30;
    match available_memory() {
        Some(bytes) => (bytes / 2).max(FLOOR),
        // Unknown: what the defaults need for four concurrent calls.
        None => 4 * (512 << 20),
    }
}

/// Physical memory, bounded by a cgroup v2 limit if there is one.
fn available_memory() -> Option<usize> {
    #[cfg(unix)]
    let physical = {
        // SAFETY: sysconf only reads configuration values.
        let (pages, page_size) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
        (pages > 0 && page_size > 0).then(|| (pages as usize).saturating_mul(page_size as usize))
    };
    #[cfg(not(unix))]
    let physical: Option<usize> = None;
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max").ok().and_then(|text| text.trim().parse().ok());
    match (physical, cgroup) {
        (Some(physical), Some(cgroup)) => Some(physical.min(cgroup)),
        (physical, cgroup) => physical.or(cgroup),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reservations_wait_for_each_other_and_are_counted() {
        let budget = MemoryBudget::new(100 * UNIT);
        let first = budget.reserve("a", 60 * UNIT).await.unwrap();
        assert_eq!(
            budget.usage(),
            BudgetUsage { budget: 100 * UNIT, reserved: 60 * UNIT, peak_reserved: 60 * UNIT, waiting: 0 }
        );
        let second = budget.reserve("b", 60 * UNIT);
        tokio::pin!(second);
        // It cannot have its reservation while the first holds its own.
        assert!(futures_poll_once(second.as_mut()).await.is_none());
        assert_eq!(budget.usage().waiting, 1);
        drop(first);
        let _second = second.await.unwrap();
        assert_eq!(
            budget.usage(),
            BudgetUsage { budget: 100 * UNIT, reserved: 60 * UNIT, peak_reserved: 60 * UNIT, waiting: 0 }
        );
    }

    #[tokio::test]
    async fn a_cap_above_the_whole_budget_is_refused_not_waited_for() {
        let budget = MemoryBudget::new(100 * UNIT);
        assert!(!budget.admits(101 * UNIT));
        let error = budget.reserve("big", 101 * UNIT).await.err().unwrap();
        assert_eq!(error.to_string(), "big's memory cap of 101 MiB exceeds the memory budget of 100 MiB");
    }

    #[test]
    fn the_default_fits_a_default_transformation() {
        assert!(default_memory_budget() >= 1 << 30);
    }

    /// Polls `future` once: its output if it was ready.
    async fn futures_poll_once<F: std::future::Future + Unpin>(mut future: F) -> Option<F::Output> {
        std::future::poll_fn(|context| {
            std::task::Poll::Ready(match std::pin::Pin::new(&mut future).poll(context) {
                std::task::Poll::Ready(output) => Some(output),
                std::task::Poll::Pending => None,
            })
        })
        .await
    }
}
