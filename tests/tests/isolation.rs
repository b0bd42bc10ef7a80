//! Isolation: one pod cannot blind detection for the others. A flooding pod refuses
//! as fast as it can (across thousands of closed local ports and in a tight loop on
//! one) while a second pod has a classic startup race: the race is still reported
//! exactly, its pod start was seen, and every refusal of the flooder is accounted
//! for in `/metrics`, sent or counted in the kernel. Its own test binary, so no other
//! test of this crate floods at the same time.

use std::{process::Command, time::Duration};

use sidecar_race_tests::{
    agent::RunAgent,
    metrics_text::{poll_until, sum},
    pod::{SimPod, empty_pods_file, require_binary, sibling_binary, write_pod_list},
    root::is_root_or_skip,
    scenario::{app_done, race_beside},
};

/// Refused connects the racing app makes before its proxy listens.
const RACE_REFUSALS: u64 = 10;
const FLOOD_SECONDS: &str = "4";
const SETTLE: Duration = Duration::from_secs(20);

#[test]
fn a_flooding_pod_does_not_blind_detection_for_its_neighbour() {
    if !is_root_or_skip("a_flooding_pod_does_not_blind_detection_for_its_neighbour") {
        return;
    }
    let ns = format!("isolation-{}", std::process::id());
    let (pods_file, source) = empty_pods_file("isolation");
    let agent = RunAgent::start(&[
        "--pods-from",
        &source,
        "--pods-poll-seconds",
        "0.1",
        // The flooder's closed ports become final (`unresolved`), and so counted, soon.
        "--unresolved-after-seconds",
        "3",
    ]);

    let mut flood_pod = SimPod::new("flood").unwrap();
    let f = flood_pod.container("flooder").unwrap();
    let flood_manifest = flood_pod.app_manifest(&ns, &f);
    write_pod_list(&pods_file, std::slice::from_ref(&flood_manifest));
    let flood_out = std::env::temp_dir().join(format!("sr-flood-{}.count", std::process::id()));
    let mut flood = Command::new(require_binary(&sibling_binary("sr-flood")));
    flood.args([
        "--seconds",
        FLOOD_SECONDS,
        "--ports",
        "16000-25999",
        "--hot",
        "9999",
    ]);
    flood.arg("--out").arg(&flood_out);
    let flooder = flood_pod.spawn(&f, flood).unwrap();

    // In the middle of the flood a pod starts and races: its app is refused exactly
    // RACE_REFUSALS times, then its classic proxy listens.
    std::thread::sleep(Duration::from_millis(1000));
    let (race_pod, app) = race_beside(&pods_file, &ns, &flood_manifest, RACE_REFUSALS);
    assert!(flood_pod.wait(flooder).unwrap().success());
    let flooded: u64 = std::fs::read_to_string(&flood_out)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _ = std::fs::remove_file(&flood_out);
    eprintln!("the flooder was refused {flooded} times");

    let race = agent.one_resolved(&race_pod.uid, SETTLE);
    assert_eq!(
        (race["phase"].as_str(), race["refused_count"].as_u64()),
        (Some("startup"), Some(RACE_REFUSALS)),
        "the neighbour's race, exactly: {race:#}"
    );
    assert_eq!(race["container_id"], app.id.as_str());
    wait_for_sum(
        &agent,
        &format!(
            r#"sidecar_race_pod_starts_total{{namespace="{ns}",workload_kind="Deployment",workload="racer"}}"#
        ),
        1,
        "the racing pod's start (its cgroup_mkdir) was seen",
    );

    let flooder_labels = format!(
        r#"namespace="{ns}",workload_kind="Pod",workload="{}""#,
        flood_manifest["metadata"]["name"].as_str().unwrap()
    );
    let suppressed_series = format!(
        r#"sidecar_race_refusals_suppressed_total{{{flooder_labels},container="flooder"}}"#
    );
    let delivered_series =
        format!(r#"sidecar_race_refused_connections_total{{{flooder_labels},container="flooder","#);
    let (delivered, suppressed) = wait_until(|| {
        let body = metrics(&agent);
        let (d, s) = (sum(&body, &delivered_series), sum(&body, &suppressed_series));
        (d + s == flooded).then_some((d, s))
    })
    .unwrap_or_else(|| {
        let body = metrics(&agent);
        // A connect whose slot the kernel's LRU table evicted is not seen at its
        // reset: counted as `kernel_table_entries_gone{table="connecting"}`, not per
        // container. Shown so that a shortfall says whether that is where it went.
        let kernel: Vec<&str> = body
            .lines()
            .filter(|l| l.starts_with("sidecar_race_kernel_"))
            .collect();
        panic!(
            "the flooder's {flooded} refusals are not all accounted for: {} delivered + {} suppressed\n{}\n{}",
            sum(&body, &delivered_series),
            sum(&body, &suppressed_series),
            kernel.join("\n"),
            agent.stderr().join("\n")
        )
    });
    eprintln!("delivered {delivered}, suppressed {suppressed}");
    assert_eq!(race["refusals_suppressed"], 0, "{race:#}");
    assert!(suppressed > 0, "the flood went over its budget");
    let hot = agent
        .incidents_of(&flood_pod.uid)
        .into_iter()
        .find(|i| i["port"] == 9999)
        .expect("the flooder's tight loop is an incident");
    assert_eq!(
        hot["refusals_suppressed"].as_u64(),
        Some(suppressed),
        "its count is marked as a lower bound: {hot:#}"
    );
    let _ = std::fs::remove_file(&pods_file);
}

fn metrics(agent: &RunAgent) -> String {
    agent.metrics()
}

fn wait_for_sum(agent: &RunAgent, prefix: &str, want: u64, what: &str) {
    if wait_until(|| (sum(&metrics(agent), prefix) == want).then_some(())).is_none() {
        panic!("{what}: `{prefix}` is not {want}:\n{}", metrics(agent));
    }
}

fn wait_until<T>(f: impl FnMut() -> Option<T>) -> Option<T> {
    poll_until(SETTLE, f)
}

/// Records the agent decoded but could not hand to its pipeline (a full channel) are
/// counted in `/metrics`, not silently gone.
#[test]
fn records_dropped_on_a_full_pipeline_are_counted() {
    if !is_root_or_skip("records_dropped_on_a_full_pipeline_are_counted") {
        return;
    }
    // A one-event channel and no refusal budget: a burst of refusals overflows it.
    let agent = RunAgent::start(&[
        "--pods-from",
        "none",
        "--channel-capacity",
        "1",
        "--refusal-burst",
        "0",
    ]);
    let mut pod = SimPod::new("drop").unwrap();
    let c = pod.container("app").unwrap();
    app_done(
        &mut pod,
        &c,
        &[
            "--connect",
            "127.0.0.1:15001",
            "--interval-ms",
            "0",
            "--attempts",
            "5000",
        ],
    );
    let dropped = wait_until(|| {
        let n = sum(&metrics(&agent), "sidecar_race_kernel_events_dropped_total");
        (n > 0).then_some(n)
    });
    assert!(
        dropped.is_some(),
        "no dropped records counted:\n{}",
        metrics(&agent)
    );
    assert!(
        metrics(&agent).contains("sidecar_race_kernel_records_undecodable_total 0"),
        "every record decoded"
    );
}
