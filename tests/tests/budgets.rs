//! Budgets per container, not per cgroup: a container that makes its own sub-cgroups
//! (a delegated tree: systemd inside, Sysbox) and floods from each still spends one
//! refusal budget, and a pod that listens and closes in a tight loop spends one
//! control budget; the racing pod beside either stays exact and no record is lost.
//! Its own test binary, so no other test of this crate floods at the same time; the
//! two tests here take turns.

use std::{
    process::Command,
    sync::Mutex,
    time::{Duration, Instant, SystemTime},
};

use sidecar_race_ebpf::layout::BUDGET_TAG_MASK;
use sidecar_race_tests::{
    agent::RunAgent,
    bpf::{u64_map_of, wait_charge_points},
    flood::Flood,
    metrics_text::{poll_until, sum},
    pod::{SimContainer, SimPod, empty_pods_file, require_binary, sibling_binary, write_pod_list},
    root::is_root_or_skip,
    scenario::race_beside,
};

/// One flood at a time on this machine's budget of CPU.
static TURN: Mutex<()> = Mutex::new(());

const RACE_REFUSALS: u64 = 10;
const FLOOD_SECONDS: u64 = 4;
const SUB_CGROUPS: usize = 50;
const SETTLE: Duration = Duration::from_secs(30);

#[test]
fn a_container_flooding_from_50_sub_cgroups_spends_one_refusal_budget() {
    if !is_root_or_skip("a_container_flooding_from_50_sub_cgroups_spends_one_refusal_budget") {
        return;
    }
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let ns = format!("budgets-{}", std::process::id());
    let (pods_file, source) = empty_pods_file("budgets-refusals");
    let agent = RunAgent::start(&[
        "--pods-from",
        &source,
        "--pods-poll-seconds",
        "0.1",
        "--unresolved-after-seconds",
        "3",
    ]);
    let mut flood_pod = SimPod::new("subflood").unwrap();
    let f = flood_pod.container("flooder").unwrap();
    let flood_manifest = flood_pod.app_manifest(&ns, &f);
    write_pod_list(&pods_file, std::slice::from_ref(&flood_manifest));
    let subs: Vec<SimContainer> = (0..SUB_CGROUPS)
        .map(|i| flood_pod.sub_cgroup(&f, &format!("worker-{i}")).unwrap())
        .collect();
    // The agent marks the container for the kernel once it has seen its cgroup.
    wait_charge_points(agent.pid(), &[f.cgroup_id], SETTLE);
    // Every flooder waits for one instant and stops FLOOD_SECONDS after it. Spawned one
    // by one into a flood already running, they would otherwise flood over a window
    // twice as long or more (one run: 10 s for 4-s flooders), which read as the one
    // budget letting through 3 times its share.
    let start_at = SystemTime::now() + Duration::from_secs(2);
    let targets: Vec<&SimContainer> = subs.iter().collect();
    let flood = Flood::start(
        &mut flood_pod,
        &targets,
        FLOOD_SECONDS,
        &["--ports", "16000-16099", "--hot", "9999"],
        start_at,
    );

    // The neighbour races a second into the flood.
    std::thread::sleep(
        start_at
            .duration_since(SystemTime::now())
            .unwrap_or_default()
            + Duration::from_secs(1),
    );
    let (race_pod, _) = race_beside(&pods_file, &ns, &flood_manifest, RACE_REFUSALS);
    let flooded = flood.total(&mut flood_pod);
    let flood_span = start_at.elapsed().unwrap();
    eprintln!("the {SUB_CGROUPS} sub-cgroups were refused {flooded} times in {flood_span:?}");

    assert_race_exact(&agent, &race_pod);
    let labels = format!(
        r#"namespace="{ns}",workload_kind="Pod",workload="{}",container="flooder""#,
        flood_manifest["metadata"]["name"].as_str().unwrap()
    );
    let delivered_series = format!("sidecar_race_refused_connections_total{{{labels},");
    let suppressed_series = format!("sidecar_race_refusals_suppressed_total{{{labels}}}");
    let (delivered, suppressed) = poll_until(SETTLE, || {
        let body = agent.metrics();
        let (d, s) = (sum(&body, &delivered_series), sum(&body, &suppressed_series));
        (d + s == flooded).then_some((d, s))
    })
    .unwrap_or_else(|| {
        let body = agent.metrics();
        panic!(
            "the flood's {flooded} refusals are not all accounted for: {} delivered + {} suppressed",
            sum(&body, &delivered_series),
            sum(&body, &suppressed_series),
        )
    });
    let one_budget = most_one_refusal_budget_sends(flood_span);
    eprintln!("delivered {delivered} (one budget: {one_budget}), suppressed {suppressed}");
    // A budget per sub-cgroup would let 50 through.
    assert!(
        delivered <= one_budget,
        "the container sent {delivered} refusal records in {flood_span:?}, more than one \
         budget ({one_budget})"
    );
    assert_nothing_lost(&agent);
    let _ = std::fs::remove_file(&pods_file);
}

#[test]
fn a_pod_listening_and_closing_in_a_loop_spends_one_control_budget() {
    if !is_root_or_skip("a_pod_listening_and_closing_in_a_loop_spends_one_control_budget") {
        return;
    }
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let ns = format!("budgets-churn-{}", std::process::id());
    let (pods_file, source) = empty_pods_file("budgets-control");
    let agent = RunAgent::start(&["--pods-from", &source, "--pods-poll-seconds", "0.1"]);
    let mut churn_pod = SimPod::new("churn").unwrap();
    let c = churn_pod.container("server").unwrap();
    let churn_manifest = churn_pod.app_manifest(&ns, &c);
    write_pod_list(&pods_file, std::slice::from_ref(&churn_manifest));
    wait_charge_points(agent.pid(), &[c.cgroup_id], SETTLE);
    let before = agent.metrics();
    let out = std::env::temp_dir().join(format!("sr-churn-{}", std::process::id()));
    let mut cmd = Command::new(require_binary(&sibling_binary("sr-flood")));
    cmd.args(["--listen-churn", "--hot", "15050"])
        .args(["--seconds", &FLOOD_SECONDS.to_string()])
        .arg("--out")
        .arg(&out);
    let churner = churn_pod.spawn(&c, cmd).unwrap();
    let started = Instant::now();

    std::thread::sleep(Duration::from_millis(1000));
    let (race_pod, _) = race_beside(&pods_file, &ns, &churn_manifest, RACE_REFUSALS);
    assert!(churn_pod.wait(churner).unwrap().success());
    let churn_seconds = started.elapsed().as_secs() + 1;
    let opened: u64 = std::fs::read_to_string(&out)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _ = std::fs::remove_file(&out);
    eprintln!("the pod opened and closed {opened} listeners");

    assert_race_exact(&agent, &race_pod);
    // Plus one second of refill: the bucket starts with the churner's first listen,
    // before `started` is taken, and refills in whole steps (one run sent 602 of 600).
    let (burst, per_second) = documented_control_budget();
    let one_budget = burst + per_second * (churn_seconds + 1);
    let suppressed = |body: &str| {
        ["listen", "listen_closed"]
            .iter()
            .map(|k| {
                sum(
                    body,
                    &format!(r#"sidecar_race_kernel_events_suppressed_total{{kind="{k}"}}"#),
                )
            })
            .sum::<u64>()
    };
    let body = agent.metrics();
    let held_back = suppressed(&body) - suppressed(&before);
    // The churning container's own count, from the kernel's per-container map: the
    // node-wide total above would also hold another container's records back.
    let its_own = u64_map_of(agent.pid(), "CONTROL_SUPPRESSED")
        .into_iter()
        .find_map(|(cgroup, n)| (cgroup == c.cgroup_id).then_some(n))
        .unwrap_or(0);
    eprintln!("control records suppressed: {held_back} on the node, {its_own} of the churner");
    assert!(
        its_own <= held_back,
        "the churner's {its_own} exceed the node's {held_back}"
    );
    assert!(
        its_own + one_budget >= 2 * opened,
        "{} listener records of the churning container were sent, more than one control \
         budget ({one_budget}):\n{body}",
        2 * opened - its_own.min(2 * opened)
    );
    assert_nothing_lost(&agent);
    let _ = std::fs::remove_file(&pods_file);
}

/// The most refusal records one container's budget lets through over `span` (the
/// kernel's GCRA: the burst, then one per interval), with its slack stated: each
/// stored time has its low 16 bits replaced by the cgroup's tag, so a record may cost
/// up to 65,535 ns less than its interval (0.7 % at 100/s, burst included). (Two CPUs
/// that both find no entry no longer each admit a first record: the entry is made with
/// a no-exist insert, and the loser charges the winner's.)
fn most_one_refusal_budget_sends(span: Duration) -> u64 {
    let burst = documented_flag_default("--refusal-burst N");
    let per_second = documented_flag_default("--refusal-refill-per-second N");
    let interval_ns = 1_000_000_000 / per_second;
    let tolerance_ns = (burst - 1) * interval_ns;
    let cheapest_record_ns = interval_ns - BUDGET_TAG_MASK;
    let span_ns = u64::try_from(span.as_nanos()).unwrap();
    1 + (tolerance_ns + span_ns) / cheapest_record_ns
}

/// The user's word for the bounds: docs/reference.md, not the code under test.
fn reference() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/reference.md");
    std::fs::read_to_string(path).expect("docs/reference.md")
}

/// The default of `flag` (e.g. `--refusal-burst N`) in the reference's flag table.
fn documented_flag_default(flag: &str) -> u64 {
    let doc = reference();
    let row = doc
        .lines()
        .find(|l| l.starts_with(&format!("| `{flag}` |")))
        .unwrap_or_else(|| panic!("docs/reference.md has no row for {flag}"));
    let default = row.split('|').nth(3).expect("a default column").trim();
    default
        .trim_matches('`')
        .parse()
        .unwrap_or_else(|e| panic!("{flag}'s documented default {default:?}: {e}"))
}

/// The control budget as the reference states it: "N at once, then M/s per container".
fn documented_control_budget() -> (u64, u64) {
    let reference = reference();
    let doc = reference
        .lines()
        .find(|l| l.starts_with("| `sidecar_race_kernel_events_suppressed_total` |"))
        .expect("docs/reference.md's row for the suppressed events");
    let at = doc
        .find(" at once, then ")
        .expect("the suppressed events' row states the control budget");
    let burst = doc[..at]
        .rsplit(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .expect("the control burst");
    let rest = &doc[at + " at once, then ".len()..];
    let per_second = rest
        .split("/s per container")
        .next()
        .and_then(|n| n.parse().ok())
        .expect("the control refill");
    (burst, per_second)
}

fn assert_race_exact(agent: &RunAgent, race_pod: &SimPod) {
    let race = agent.one_resolved(&race_pod.uid, SETTLE);
    assert_eq!(
        (race["phase"].as_str(), race["refused_count"].as_u64()),
        (Some("startup"), Some(RACE_REFUSALS)),
        "the neighbour's race, exactly: {race:#}"
    );
    assert_eq!(race["refusals_suppressed"], 0, "{race:#}");
}

/// No record was lost to a full ring, of any kind.
fn assert_nothing_lost(agent: &RunAgent) {
    let body = agent.metrics();
    assert_eq!(
        sum(&body, "sidecar_race_kernel_events_lost_total"),
        0,
        "records lost to a full ring:\n{body}"
    );
}
