//! How much the bench measures (the full run's plan and `--smoke`'s), and the targets
//! its verdicts hold the figures to.

use std::time::Duration;

/// How much to measure.
pub struct Plan {
    pub smoke: bool,
    pub connects: u32,
    pub rounds: usize,
    /// Rounds of the successful-connect rows, and how long each run in them lasts.
    pub success_rounds: usize,
    pub round: Duration,
    pub scale_pods: usize,
    pub scale: Duration,
    pub index_cgroups: usize,
    pub latency_races: usize,
    /// How long the neighbour refuses in the storm row.
    pub storm: Duration,
    /// `getppid` calls per run of the unrelated-syscall rows, and their rounds.
    pub syscall_calls: u32,
    pub syscall_rounds: usize,
}

pub const FULL: Plan = Plan {
    smoke: false,
    connects: 20_000,
    rounds: 7,
    success_rounds: 9,
    round: Duration::from_secs(2),
    scale_pods: 110,
    scale: Duration::from_secs(60),
    index_cgroups: 1_000,
    latency_races: 300,
    storm: Duration::from_secs(30),
    syscall_calls: 2_000_000,
    syscall_rounds: 15,
};

pub const SMOKE: Plan = Plan {
    smoke: true,
    connects: 300,
    rounds: 1,
    success_rounds: 2,
    round: Duration::from_millis(200),
    scale_pods: 5,
    scale: Duration::from_secs(1),
    index_cgroups: 20,
    latency_races: 3,
    storm: Duration::from_secs(2),
    syscall_calls: 20_000,
    syscall_rounds: 2,
};

/// Successful connects, per loop: the loop's CPU per connection bare / with the agent
/// (the headline), and bare CPU / (bare CPU + the programs' run time) (the bound); the
/// same for delivered UDP datagrams and unrelated drops (issue #49).
pub const TARGET_SUCCESS_RATIO: f64 = 0.98;
/// Unrelated syscalls, CPU per call bare / beside the agent as shipped.
pub const TARGET_SYSCALL_RATIO: f64 = 0.98;
pub const TARGET_US_PER_REFUSAL: f64 = 1.0;
pub const TARGET_SCALE_CPU_PERCENT: f64 = 0.5;
pub const TARGET_SCALE_RSS_MIB: f64 = 40.0;
/// The agent's default reorder window; p99 detection latency may exceed it by 100 ms.
pub const REORDER_WINDOW_MS: f64 = 200.0;
