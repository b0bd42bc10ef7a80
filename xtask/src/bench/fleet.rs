//! Fleet arithmetic on paper, at 5,000 nodes: what the pod sources cost the API server
//! and the node, and the worst case of metric series. Pod sizes are measured on the
//! real Pod JSON fixtures the unit tests use.

use std::fmt::Write;

use crate::run::workspace_root;

pub const NODES: u64 = 5_000;
/// The kubelet's default maximum of pods per node.
const PODS_PER_NODE: u64 = 110;
/// `--pods-poll-seconds` default of the kubelet source.
const KUBELET_POLL_S: f64 = 5.0;

/// The average size of the fixture pods in bytes, and how many there are.
fn pod_json_size() -> (u64, usize) {
    let dir = workspace_root().join("sidecar-race-agent/tests/fixtures/pods");
    let sizes: Vec<u64> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| e.metadata().ok().map(|m| m.len()))
        .collect();
    if sizes.is_empty() {
        return (0, 0);
    }
    (sizes.iter().sum::<u64>() / sizes.len() as u64, sizes.len())
}

/// Worst-case series per node (docs/reference.md, "Metrics") for W workloads with C clients and
/// S sidecars each, P ports per sidecar.
fn series(w: u64, c: u64, s: u64, p: u64) -> u64 {
    let refused = w * c * s * p * 4;
    let incidents = w * s * 4 * 4;
    let window = w * s * 4 * 17;
    let starts = 2 * w;
    refused + incidents + window + starts + 10
}

pub fn section() -> String {
    let (pod, n) = pod_json_size();
    let list = pod * PODS_PER_NODE;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Pod JSON averages {pod} bytes ({n} real Pod fixtures, `sidecar-race-agent/tests/fixtures/pods`); \
         {PODS_PER_NODE} pods per node; {NODES} nodes.\n"
    );
    let _ = writeln!(out, "| source | API server | per node |\n|---|---|---|");
    let _ = writeln!(
        out,
        "| `api` (list + watch, `spec.nodeName` field selector) | {NODES} watches open; a list of {PODS_PER_NODE} pods ({:.1} MB) per agent start or 410 relist, {:.1} GB when the whole fleet restarts; then one event (≈{pod} B) per change of a pod, sent to the one node that runs it | {:.1} MB at start, then ≈{pod} B per pod change on the node |",
        list as f64 / 1e6,
        (list * NODES) as f64 / 1e9,
        list as f64 / 1e6,
    );
    let _ = writeln!(
        out,
        "| `kubelet` (`/pods` polled every {KUBELET_POLL_S} s) | none | {:.1} MB per poll from the local kubelet, {:.0} kB/s on loopback |",
        list as f64 / 1e6,
        list as f64 / KUBELET_POLL_S / 1e3,
    );
    let typical = series(50, 2, 2, 1);
    let worst = series(PODS_PER_NODE, 2, 2, 1);
    let _ = writeln!(
        out,
        "\nMetric series per node, worst case by the formula in docs/reference.md: {typical} for 50 workloads \
         with 2 clients, 2 sidecars and 1 port each; {worst} if all {PODS_PER_NODE} pods were \
         separate such workloads, racing in every phase. At {NODES} nodes: {:.1} M and {:.1} M \
         series. Without races only the starts and the ~10 health series exist: {} per node, \
         {:.1} M in the fleet.",
        (typical * NODES) as f64 / 1e6,
        (worst * NODES) as f64 / 1e6,
        2 * PODS_PER_NODE + 10,
        ((2 * PODS_PER_NODE + 10) * NODES) as f64 / 1e6,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_formula_matches_the_documented_example() {
        // docs/reference.md, "Metrics": "For 50 workloads with 2 clients, 2 sidecars and 1 port each:
        // ≤ 800 + 1,600 + 6,800 + 100" plus ~10 health series.
        assert_eq!(series(50, 2, 2, 1), 800 + 1_600 + 6_800 + 100 + 10);
    }
}
