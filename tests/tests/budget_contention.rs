//! One container's budget contended from every CPU: two flooders, two threads each, in
//! one container whose budget admits every record (a burst of a million, refilled far
//! faster than they refuse), so every refusal writes the budget entry and CPUs collide
//! on it. On 5.12+ each collision is a failed compare-and-exchange, read again once and
//! counted (`sidecar_race_kernel_budget_conflicts_total`); the test shows that branch
//! taken and every refusal still accounted for, as delivered or suppressed, none lost.
//! Its own test binary, so no other flood shares the machine.

use std::time::{Duration, SystemTime};

use sidecar_race_tests::{
    agent::RunAgent,
    flood::Flood,
    metrics_text::{poll_until, sum},
    pod::{SimPod, empty_pods_file, write_pod_list},
    root::{is_root_or_skip, skip},
};

const TEST: &str =
    "a_budget_contended_from_every_cpu_takes_the_exchange_branch_and_loses_no_refusal";
const FLOODERS: usize = 2;
const FLOOD_SECONDS: u64 = 3;
const SETTLE: Duration = Duration::from_secs(60);

#[test]
fn a_budget_contended_from_every_cpu_takes_the_exchange_branch_and_loses_no_refusal() {
    if !is_root_or_skip(TEST) {
        return;
    }
    if !kernel_has_cmpxchg() {
        skip(
            TEST,
            "the kernel is older than 5.12: budgets are written plainly there",
        );
        return;
    }
    let ns = format!("contention-{}", std::process::id());
    let (pods_file, source) = empty_pods_file("budget-contention");
    let agent = RunAgent::start(&[
        "--pods-from",
        &source,
        "--pods-poll-seconds",
        "0.1",
        // Its refusals reach the metrics as their incidents close (no sidecar ever
        // listens: unresolved).
        "--unresolved-after-seconds",
        "3",
        // Every record admitted, each one a write of a new time: a million at once,
        // then 10,000/s (an interval of 100 µs, above the 65 µs the entry's tag takes
        // from its time, so no two writes store the same value).
        "--refusal-burst",
        "1000000",
        "--refusal-refill-per-second",
        "10000",
        // Room for the whole flood, so that a slow reader loses nothing.
        "--ring-buffer-bytes",
        "67108864",
        "--channel-capacity",
        "2000000",
    ]);
    let mut pod = SimPod::new("contended").unwrap();
    let c = pod.container("flooder").unwrap();
    let manifest = pod.app_manifest(&ns, &c);
    write_pod_list(&pods_file, std::slice::from_ref(&manifest));
    let labels = format!(
        r#"namespace="{ns}",workload_kind="Pod",workload="{}",container="flooder""#,
        manifest["metadata"]["name"].as_str().unwrap()
    );
    // No wait for the agent to read the pod: refusals of a container it has not named
    // yet wait for its names (and the whole flood is one cgroup: one budget either way).

    let start_at = SystemTime::now() + Duration::from_secs(1);
    let flood = Flood::start(
        &mut pod,
        &[&c; FLOODERS],
        FLOOD_SECONDS,
        &["--ports", "17000-17099", "--hot", "17999"],
        start_at,
    );
    let flooded = flood.total(&mut pod);

    let delivered_series = format!("sidecar_race_refused_connections_total{{{labels},");
    let suppressed_series = format!("sidecar_race_refusals_suppressed_total{{{labels}}}");
    let accounted = poll_until(SETTLE, || {
        let body = agent.metrics();
        let (d, s) = (
            sum(&body, &delivered_series),
            sum(&body, &suppressed_series),
        );
        (d + s == flooded).then_some((d, s, body))
    });
    let Some((delivered, suppressed, body)) = accounted else {
        let body = agent.metrics();
        let log = agent.stderr();
        panic!(
            "the flood's {flooded} refusals are not all accounted for: {} delivered + {} \
             suppressed:\n{body}\nthe agent's log ends:\n{}",
            sum(&body, &delivered_series),
            sum(&body, &suppressed_series),
            log[log.len().saturating_sub(20)..].join("\n"),
        )
    };
    let conflicts = sum(
        &body,
        r#"sidecar_race_kernel_budget_conflicts_total{budget="refusal"}"#,
    );
    eprintln!(
        "{flooded} refusals from {FLOODERS} flooders: {delivered} delivered, {suppressed} \
         suppressed, {conflicts} budget conflicts"
    );
    assert!(
        conflicts > 0,
        "{flooded} refusals on every CPU against one budget and no conflict counted:\n{body}"
    );
    assert_eq!(
        sum(&body, "sidecar_race_kernel_events_lost_total"),
        0,
        "records lost to a full ring:\n{body}"
    );
    let _ = std::fs::remove_file(&pods_file);
}

/// Linux 5.12+, from `uname -r` (e.g. `6.1.0-18-amd64`).
fn kernel_has_cmpxchg() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release
        .trim()
        .split(['.', '-'])
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (5, 12)
}
