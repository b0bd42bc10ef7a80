//! The simulated pod kit: a pod as a node has one (a network namespace, cgroups laid
//! out as the kubelet lays them out, real processes), the stand-in `sr-proxy` and
//! `sr-app`, and the agent binary run as a user runs it. `cargo xtask demo` builds
//! this crate and the agent alone; the test suite (`sidecar-race-tests`) builds on it.
//!
//! And the view of the real cluster of `cargo xtask cluster up` (`cluster`: kubectl,
//! pods, the agent's pod; `stand_in`: busybox pods; `glibc_fleet`: ordinary glibc
//! pods and the racing shapes in the glibc image; `real_sidecars`: the real OpenTelemetry
//! Collector on a Unix socket and its glibc client; `datagram_sidecars`: the statsd
//! exporter on UDP and a Unix datagram log relay; `operator_prometheus`: the real
//! Prometheus on the Prometheus Operator's configuration), which the cluster tier and
//! `cargo xtask demo --cluster` (`sr-cluster-demo`) share. Nothing here needs protoc.

pub mod agent;
pub mod cluster;
pub mod command;
pub mod datagram_sidecars;
pub mod flood;
pub mod glibc_fleet;
pub mod http;
pub mod operator_prometheus;
pub mod otelcol;
pub mod pinned;
pub mod pod;
pub mod prometheus;
pub mod real_sidecars;
pub mod root;
pub mod scenario;
pub mod stand_in;
