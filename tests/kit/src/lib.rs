//! The simulated pod kit: a pod as a node has one (a network namespace, cgroups laid
//! out as the kubelet lays them out, real processes), the stand-in `sr-proxy` and
//! `sr-app`, and the agent binary run as a user runs it. `cargo xtask demo` builds
//! this crate and the agent alone; the test suite (`sidecar-race-tests`) builds on it.

pub mod agent;
pub mod http;
pub mod pod;
pub mod root;
pub mod scenario;
