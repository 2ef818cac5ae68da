//! Per-plugin resource limits and the wasmtime limiter that enforces the memory cap.

use std::time::Duration;

use super::budget::HostAccount;

/// Per-plugin limits, set from the plugin's manifest or the defaults (1 s, 30 s, 64 MiB).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest a single call (or instantiation) may run before it is interrupted, counting the
    /// guest's own time only: time the host spends waiting on an external system for it (an
    /// outbound HTTP exchange) is not counted (see `host_wait.rs`).
    pub deadline: Duration,
    /// Longest a single call may take in wall-clock time, host waits included; a call still
    /// waiting on a host call then is interrupted. Never below `deadline`.
    pub wall_limit: Duration,
    /// The plugin's memory budget: the most all its instances may use together, their linear
    /// memories and what the host holds for them (see `budget.rs`). One instance's linear
    /// memory is capped by it too.
    pub memory_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(1),
            wall_limit: Duration::from_secs(30),
            memory_bytes: 64 << 20,
        }
    }
}

/// Error a memory growth beyond the cap raises; it traps the guest at the `memory.grow` (rather
/// than letting the allocator see -1) so the cause is unambiguous and the call ends at once.
#[derive(Debug, thiserror::Error)]
#[error("linear memory would grow to {desired} bytes, over the plugin's cap of {cap} bytes")]
pub(crate) struct MemoryCapExceeded {
    pub desired: u64,
    pub cap: u64,
}

/// Tracks the total linear memory of one instance against its cap, and charges every growth
/// to the plugin's [`MemoryBudget`](super::budget::MemoryBudget) before it happens (the
/// instance's [`HostAccount`] gives it back when the store is dropped).
pub(crate) struct MemoryLimiter {
    cap: u64,
    total: u64,
    /// Set when a growth was refused; lets the caller classify the resulting failure.
    pub cap_hit: bool,
    /// The instance's charges to its plugin's budget, linear and host-side.
    pub account: HostAccount,
}

impl MemoryLimiter {
    pub(crate) fn new(cap: u64, account: HostAccount) -> Self {
        Self {
            cap,
            total: 0,
            cap_hit: false,
            account,
        }
    }
}

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let desired_total = self.total + (desired as u64).saturating_sub(current as u64);
        if desired_total > self.cap {
            self.cap_hit = true;
            return Err(MemoryCapExceeded {
                desired: desired_total,
                cap: self.cap,
            }
            .into());
        }
        let growth = desired_total - self.total;
        if let Err(refused) = self.account.grow_linear(growth) {
            self.cap_hit = true;
            return Err(refused.into());
        }
        self.total = desired_total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Tables hold function references; a generous fixed bound keeps them from being a
        // way around the memory cap.
        Ok(desired <= 100_000)
    }
}
