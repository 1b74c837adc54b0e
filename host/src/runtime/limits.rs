//! Per-call limits: the deadline and the memory cap, with their defaults per
//! world, and the resource limiter that enforces the cap over all memories.

use std::time::Duration;

use super::World;

/// What one call of a plugin may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time from instantiation to the call's return.
    pub deadline: Duration,
    /// Bytes of linear memory, summed over all the component's memories.
    pub memory: usize,
}

impl Limits {
    /// The defaults: transformation 60 s / 512 MiB, checksum 5 s / 64 MiB,
    /// listener 1 s / 64 MiB.
    pub fn default_for(world: World) -> Limits {
        const MIB: usize = 1 << 20;
        match world {
            World::Transformation => Limits { deadline: Duration::from_secs(60), memory: 512 * MIB },
            World::Checksum => Limits { deadline: Duration::from_secs(5), memory: 64 * MIB },
            World::Listener => Limits { deadline: Duration::from_secs(1), memory: 64 * MIB },
        }
    }
}

/// Bytes of captured stdout and of stderr kept per call.
pub const CAPTURE_LIMIT: usize = 64 << 10;

/// Table elements a component may have in all; generous for real guests,
/// small enough that tables cannot be used to exhaust host memory.
const TABLE_ELEMENTS_LIMIT: usize = 100_000;

/// Enforces [`Limits::memory`] over the sum of all linear memories, which
/// wasmtime's own `StoreLimits` cannot: it limits each memory separately.
#[derive(Debug)]
pub(crate) struct MemoryLimiter {
    cap: usize,
    in_use: usize,
    peak: usize,
    /// Set when a growth was refused: the trap that follows is then reported
    /// as the memory cap being hit, not as whatever the guest did next.
    pub(crate) refused: Option<usize>,
}

impl MemoryLimiter {
    pub(crate) fn new(cap: usize) -> Self {
        MemoryLimiter { cap, in_use: 0, peak: 0, refused: None }
    }

    pub(crate) fn peak(&self) -> usize {
        self.peak
    }
}

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        let total = self.in_use - current.min(self.in_use) + desired;
        if total > self.cap {
            self.refused = Some(total);
            return Ok(false);
        }
        self.in_use = total;
        self.peak = self.peak.max(total);
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= TABLE_ELEMENTS_LIMIT)
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
}
