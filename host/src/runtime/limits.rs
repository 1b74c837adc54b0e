//! Per-call limits: the deadline (of wall-clock or of CPU time) and the
//! memory cap, with their defaults per world, and the resource limiter that
//! enforces the cap over all memories.

use std::time::Duration;

use super::World;

/// What one call of a plugin may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Time from instantiation to the call's return, of the [`Clock`]'s kind.
    pub deadline: Duration,
    /// Bytes of linear memory, summed over all the component's memories.
    pub memory: usize,
    /// What the deadline counts.
    pub clock: Clock,
}

/// What a deadline counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// Wall-clock time. A guest blocked in a host call is abandoned a short
    /// grace period after its deadline.
    Wall,
    /// CPU time the call itself used: waiting for a CPU, or blocked in a host
    /// call (a sleep), does not count. A guest blocked in a host call is
    /// abandoned at [`CPU_WALL_CEILING`] times its deadline of wall-clock time.
    Cpu,
}

/// How many times its deadline of wall-clock time a call whose deadline
/// counts CPU time may take: a ceiling for guests blocked in a host call,
/// above what a starved but working listener needs. Listeners run at nice
/// 19, and the kernel weighs nice 0 against nice 19 as 1024 to 15: beside
/// one CPU-bound process at nice 0 on its CPU, a listener gets about 1.4%
/// of it, so an event that uses its whole CPU-time deadline takes about 70
/// times that deadline. 200 leaves room for about three such processes per
/// CPU before a working listener is taken for a blocked one.
pub const CPU_WALL_CEILING: u32 = 200;

impl Limits {
    /// The defaults: transformation 60 s of wall-clock time / 512 MiB,
    /// engine transformation an hour for the whole job / 64 MiB for the call
    /// that describes it,
    /// checksum 5 s of wall-clock time / 64 MiB, listener 1 s of CPU time
    /// per call / 64 MiB. Listeners run at the lowest CPU priority on
    /// purpose, so their deadline must not count the time they wait for a
    /// CPU; a transformation's and a checksum's deadline is how long a view
    /// or the opening of a scheduler may take, which is wall-clock time.
    pub fn default_for(world: World) -> Limits {
        const MIB: usize = 1 << 20;
        match world {
            World::Transformation => {
                Limits { deadline: Duration::from_secs(60), memory: 512 * MIB, clock: Clock::Wall }
            }
            // The deadline is the whole job's, on the engine; describing it
            // is one short call (see `JOB_CALL_DEADLINE`).
            World::Engine => Limits { deadline: Duration::from_secs(3600), memory: 64 * MIB, clock: Clock::Wall },
            World::Checksum => Limits { deadline: Duration::from_secs(5), memory: 64 * MIB, clock: Clock::Wall },
            World::Listener => Limits { deadline: Duration::from_secs(1), memory: 64 * MIB, clock: Clock::Cpu },
        }
    }

    /// The most wall-clock time a call may take before it is abandoned
    /// from outside, which also stops a guest blocked in a host call.
    pub(crate) fn wall_limit(&self) -> Duration {
        match self.clock {
            Clock::Wall => self.deadline + WALL_GRACE,
            Clock::Cpu => self.deadline.saturating_mul(CPU_WALL_CEILING),
        }
    }
}

/// Extra time past a wall-clock deadline before a call is abandoned from
/// outside, for guests blocked in a host call, where epochs cannot
/// interrupt them.
const WALL_GRACE: Duration = Duration::from_millis(500);

/// Bytes of captured stdout and of stderr kept per call.
pub const CAPTURE_LIMIT: usize = 64 << 10;

/// Table elements a component may have, summed over its tables: generous
/// for real guests, small enough that tables cannot exhaust host memory.
const TABLE_ELEMENTS_LIMIT: usize = 100_000;

/// Instances, tables and memories per store. A Rust component has a handful
/// of each; the wasmtime default of 10,000 would let a crafted component
/// hold gigabytes outside the memory cap.
const COUNT_LIMIT: usize = 100;

/// The longest deadline a plugin may be given: long enough for any real
/// transformation, short enough that `Instant + deadline` cannot overflow.
pub const MAX_DEADLINE: Duration = Duration::from_secs(7 * 24 * 3600);

/// The most memory a plugin may be given: what a 32-bit memory can address.
pub const MAX_MEMORY: usize = 4 << 30;

impl Limits {
    /// These limits within [`MAX_DEADLINE`] and [`MAX_MEMORY`].
    pub(crate) fn clamped(self) -> Limits {
        Limits { deadline: self.deadline.min(MAX_DEADLINE), memory: self.memory.min(MAX_MEMORY), ..self }
    }
}

/// Enforces [`Limits::memory`] over the sum of all linear memories, which
/// wasmtime's own `StoreLimits` cannot: it limits each memory separately.
#[derive(Debug)]
pub(crate) struct MemoryLimiter {
    cap: usize,
    in_use: usize,
    peak: usize,
    /// The growth just approved, undone if wasmtime then fails to grow.
    pending: usize,
    table_elements: usize,
    /// Set when a growth was refused: the trap that follows is then reported
    /// as the memory cap being hit, not as whatever the guest did next.
    pub(crate) refused: Option<usize>,
}

impl MemoryLimiter {
    pub(crate) fn new(cap: usize) -> Self {
        MemoryLimiter { cap, in_use: 0, peak: 0, pending: 0, table_elements: 0, refused: None }
    }

    pub(crate) fn peak(&self) -> usize {
        self.peak
    }
}

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        // `desired` comes from the guest and may be near usize::MAX: no
        // arithmetic here may overflow.
        let growth = desired.saturating_sub(current);
        let total = self.in_use.saturating_add(growth);
        if total > self.cap || maximum.is_some_and(|max| desired > max) {
            self.refused = Some(total);
            return Ok(false);
        }
        self.in_use = total;
        self.pending = growth;
        self.peak = self.peak.max(total);
        Ok(true)
    }

    fn memory_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        self.in_use -= std::mem::take(&mut self.pending);
        Ok(())
    }

    fn table_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        let total = self.table_elements.saturating_add(desired.saturating_sub(current));
        if total > TABLE_ELEMENTS_LIMIT {
            return Ok(false);
        }
        self.table_elements = total;
        Ok(true)
    }

    fn instances(&self) -> usize {
        COUNT_LIMIT
    }

    fn tables(&self) -> usize {
        COUNT_LIMIT
    }

    fn memories(&self) -> usize {
        COUNT_LIMIT
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::ResourceLimiter;

    #[test]
    fn the_cap_applies_to_the_sum_of_memories() {
        let mut limiter = MemoryLimiter::new(100);
        assert!(limiter.memory_growing(0, 60, None).unwrap());
        assert!(limiter.memory_growing(0, 40, None).unwrap());
        assert_eq!(limiter.refused, None);
        // A third memory of any size is over the cap, though each is small.
        assert!(!limiter.memory_growing(0, 1, None).unwrap());
        assert_eq!(limiter.refused, Some(101));
        assert_eq!(limiter.peak(), 100);
    }

    #[test]
    fn huge_requests_are_refused_without_overflow() {
        let mut limiter = MemoryLimiter::new(100);
        assert!(limiter.memory_growing(0, 50, None).unwrap());
        assert!(!limiter.memory_growing(10, usize::MAX, None).unwrap());
        assert_eq!(limiter.refused, Some(usize::MAX));
        // A memory's own declared maximum is respected too.
        assert!(!limiter.memory_growing(0, 20, Some(10)).unwrap());
    }

    #[test]
    fn a_failed_growth_gives_its_memory_back() {
        let mut limiter = MemoryLimiter::new(100);
        assert!(limiter.memory_growing(0, 80, None).unwrap());
        limiter.memory_grow_failed(wasmtime::format_err!("mmap failed")).unwrap();
        assert!(limiter.memory_growing(0, 90, None).unwrap());
    }

    #[test]
    fn table_elements_are_summed_over_tables() {
        let mut limiter = MemoryLimiter::new(100);
        assert!(limiter.table_growing(0, TABLE_ELEMENTS_LIMIT - 10, None).unwrap());
        assert!(!limiter.table_growing(0, 11, None).unwrap());
        assert!(limiter.table_growing(0, 10, None).unwrap());
    }
}
