//! Zero-loss agent restarts (#33) on the real kernel: the agent pins its kernel state
//! (a private bpffs here), a race runs across a restart of the agent, and the agent
//! after it must tell the whole race: the refusals the old one read (its checkpoint),
//! those the kernel recorded while no agent ran (the pinned ring), and the rest.

use std::time::{Duration, Instant};

use serde_json::Value;
use sidecar_race_tests::{
    agent::RunAgent,
    pinned::PinnedPlace,
    pod::{Declared, SimPod, empty_pods_file, sibling_binary, write_pod_list},
    root::is_root_or_skip,
    scenario::{CountedApp, proxy},
};

/// The proxy's delay: the race's true window.
const LATE_MS: u64 = 5_000;
/// The app dials this often, so it is refused about 50 times.
const INTERVAL_MS: &str = "100";

fn window(i: &Value) -> f64 {
    i["race_window_seconds"]
        .as_f64()
        .unwrap_or_else(|| panic!("no window: {i:#}"))
}

/// A pinning agent reading the pods file `source`.
fn agent(place: &PinnedPlace, source: &str) -> RunAgent {
    agent_with(place, source, &[])
}

/// [`agent`] with `extra` arguments (another load option: another build's key).
fn agent_with(place: &PinnedPlace, source: &str, extra: &[&str]) -> RunAgent {
    place.agent(source, extra)
}

/// A new pod (Deployment shop/checkout) whose proxy listens `late_ms` late, and its
/// app dialling it; the agent watches from before the pod starts.
fn race(name: &str, pods_file: &std::path::Path, late_ms: u64) -> (SimPod, CountedApp, Instant) {
    let mut pod = SimPod::new(name).unwrap();
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    let manifest = pod.app_and_proxy_manifest("shop", "checkout", &a, &p, Declared::App);
    write_pod_list(pods_file, &[manifest]);
    let delay = late_ms.to_string();
    proxy(
        &mut pod,
        &p,
        &["--listen", "127.0.0.1:15001", "--delay-ms", &delay],
    );
    let started = Instant::now();
    let app = CountedApp::start(
        &mut pod,
        &a,
        &sibling_binary("sr-app"),
        &["--connect", "127.0.0.1:15001", "--interval-ms", INTERVAL_MS],
    );
    (pod, app, started)
}

#[test]
fn a_startup_race_across_an_agent_restart_is_one_incident_with_every_refusal() {
    if !is_root_or_skip("a_startup_race_across_an_agent_restart_is_one_incident_with_every_refusal")
    {
        return;
    }
    let place = PinnedPlace::new("restart");
    let (pods_file, source) = empty_pods_file("restart");
    let old = agent(&place, &source);
    old.wait_log(&["programs and maps pinned"], Duration::from_secs(5));
    let (mut pod, app, started) = race("restart", &pods_file, LATE_MS);
    // 1.5 s into the race (about 15 refusals read by the old agent), a rollout stops
    // it; the new one starts at once, the proxy listens 3.5 s later.
    std::thread::sleep(Duration::from_millis(1_500).saturating_sub(started.elapsed()));
    let old_log = old.stop();
    assert!(
        old_log.iter().any(|l| l.contains("checkpoint")),
        "the old agent says it wrote its checkpoint: {old_log:#?}"
    );
    let new = agent(&place, &source);
    new.wait_log(&["adopted the programs and maps"], Duration::from_secs(5));
    let refused = app.refused(&mut pod);
    assert!(refused >= 40, "the app was refused {refused} times");
    let i = new.one_resolved_holding(&pod.uid, refused, Duration::from_secs(15));
    assert_eq!(i["phase"], "startup", "{i:#}");
    assert_eq!(
        i["refused_count"].as_u64(),
        Some(refused),
        "every refusal the app counted, across the restart: {i:#}"
    );
    let truth = LATE_MS as f64 / 1000.0;
    assert!(
        (window(&i) - truth).abs() <= 0.3,
        "window {} vs the proxy's {truth} s delay: {i:#}",
        window(&i)
    );
    eprintln!(
        "SIGTERM restart: {} of {refused} refusals in the incident, window {:.3} s (truth {truth} s)",
        i["refused_count"],
        window(&i)
    );
    assert_eq!(place.keys().len(), 1, "one build, one set of pins");
    new.stop();
    let _ = std::fs::remove_file(pods_file);
}

#[test]
fn a_killed_agent_loses_at_most_what_it_read_since_its_last_checkpoint_and_says_so() {
    if !is_root_or_skip(
        "a_killed_agent_loses_at_most_what_it_read_since_its_last_checkpoint_and_says_so",
    ) {
        return;
    }
    let place = PinnedPlace::new("killed");
    let (pods_file, source) = empty_pods_file("killed");
    let old = agent(&place, &source);
    old.wait_log(&["programs and maps pinned"], Duration::from_secs(5));
    // The proxy is 9 s late; the agent is killed 7 s in, after its periodic checkpoint
    // at 5 s of its life.
    let (mut pod, app, started) = race("killed", &pods_file, 9_000);
    std::thread::sleep(Duration::from_millis(7_000).saturating_sub(started.elapsed()));
    old.kill();
    let new = agent(&place, &source);
    new.wait_log(&["adopted the programs and maps"], Duration::from_secs(5));
    let said = new.wait_log(&["without its final checkpoint"], Duration::from_secs(5));
    assert!(said.contains("are lost"), "{said}");
    let refused = app.refused(&mut pod);
    let i = new.one_resolved_holding(&pod.uid, 0, Duration::from_secs(15));
    assert_eq!(i["phase"], "startup", "{i:#}");
    let seen = i["refused_count"].as_u64().unwrap();
    // Lost: what the killed agent read after its last checkpoint, at most one
    // interval's dials (5 s at one per 100 ms); the ring kept the rest.
    assert!(
        seen <= refused && seen + 52 >= refused,
        "{seen} of {refused} refusals after a kill -9: {i:#}"
    );
    eprintln!("kill -9: {} of {refused} refusals lost", refused - seen);
    new.stop();
    let _ = std::fs::remove_file(pods_file);
}

#[test]
fn a_new_build_takes_over_mid_race_without_losing_or_doubling_a_refusal() {
    if !is_root_or_skip("a_new_build_takes_over_mid_race_without_losing_or_doubling_a_refusal") {
        return;
    }
    let place = PinnedPlace::new("handover");
    let (pods_file, source) = empty_pods_file("handover");
    let old = agent(&place, &source);
    old.wait_log(&["programs and maps pinned"], Duration::from_secs(5));
    let old_keys = place.keys();
    let (mut pod, app, started) = race("handover", &pods_file, LATE_MS);
    std::thread::sleep(Duration::from_millis(1_500).saturating_sub(started.elapsed()));
    old.stop();
    // Another ring size is another layout key: the new agent loads its own programs
    // beside the old ones, then takes over what the old rings hold.
    let new = agent_with(&place, &source, &["--ring-buffer-bytes", "2097152"]);
    new.wait_log(
        &["read what an earlier build's agent left"],
        Duration::from_secs(5),
    );
    let keys = place.keys();
    assert!(
        keys.len() == 1 && keys != old_keys,
        "{old_keys:?} → {keys:?}: the old pins went"
    );
    let refused = app.refused(&mut pod);
    let i = new.one_resolved_holding(&pod.uid, refused, Duration::from_secs(15));
    assert_eq!(
        i["refused_count"].as_u64(),
        Some(refused),
        "every refusal once, across the handover: {i:#}"
    );
    assert!(
        (window(&i) - LATE_MS as f64 / 1000.0).abs() <= 0.3,
        "window {}: {i:#}",
        window(&i)
    );
    new.stop();
    let _ = std::fs::remove_file(pods_file);
}

#[test]
fn pin_off_unpins_what_an_earlier_agent_left() {
    if !is_root_or_skip("pin_off_unpins_what_an_earlier_agent_left") {
        return;
    }
    let place = PinnedPlace::new("off");
    let (pods_file, source) = empty_pods_file("off");
    let pinning = agent(&place, &source);
    pinning.wait_log(&["programs and maps pinned"], Duration::from_secs(5));
    pinning.stop();
    assert_eq!(place.keys().len(), 1, "pins outlive their agent");
    let mut args = vec!["--pods-from".to_string(), source.clone()];
    args.extend(place.args());
    args[3] = "off".into();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let off = RunAgent::start(&args);
    off.wait_log(&["--pin=off: unpinned"], Duration::from_secs(5));
    assert!(place.keys().is_empty(), "nothing pinned after --pin=off");
    off.stop();
    let _ = std::fs::remove_file(pods_file);
}
