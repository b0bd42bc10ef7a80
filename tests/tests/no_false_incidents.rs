//! Zero false incidents: 50 well-ordered pod starts over about 60 s (the proxy listens
//! before the app starts; pods come and go) must leave `/api/v1/incidents` empty.
//! A positive control in the same run, halfway through, proves the agent was not
//! blind: one pod races (its proxy listens 1 s late) and gets exactly one incident,
//! holding the app's own count of refused dials.
//! Its own test binary, so no other test's races run at the same time.

use std::time::{Duration, Instant};

use sidecar_race_tests::{
    agent::RunAgent,
    pod::SimPod,
    root::is_root_or_skip,
    scenario::{app_done, late_proxy_race, proxy_serving},
};

const PODS: usize = 50;
const RUN: Duration = Duration::from_secs(60);

#[test]
fn fifty_well_ordered_pod_starts_give_no_incident() {
    if !is_root_or_skip("fifty_well_ordered_pod_starts_give_no_incident") {
        return;
    }
    let agent = RunAgent::start(&["--pods-from", "none"]);
    let start = Instant::now();
    let mut alive: Vec<SimPod> = Vec::new();
    let mut uids: Vec<String> = Vec::new();
    let mut control = None;
    for n in 0..PODS {
        let mut pod = SimPod::new(&format!("ok{n}")).unwrap();
        uids.push(pod.uid.clone());
        let p = pod.container("proxy").unwrap();
        let a = pod.container("app").unwrap();
        // A native sidecar with a startupProbe: the app starts once it serves.
        proxy_serving(&mut pod, &p, 15001);
        app_done(
            &mut pod,
            &a,
            &["--connect", "127.0.0.1:15001", "--attempts", "1"],
        );
        alive.push(pod);
        if n == PODS / 2 {
            let mut racing = SimPod::new("control").unwrap();
            let (p, a) = (
                racing.container("proxy").unwrap(),
                racing.container("app").unwrap(),
            );
            let refused = late_proxy_race(&mut racing, &p, &a, 1000);
            control = Some((racing, refused));
        }
        if alive.len() > 5 {
            drop(alive.remove(0)); // pods go away too (a rollout)
        }
        // Spread the starts over the run.
        let due = RUN.mul_f64((n + 1) as f64 / PODS as f64);
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
    }
    drop(alive);
    std::thread::sleep(Duration::from_secs(1));
    // Only this test's pods: the agent watches the whole node, where a developer may run
    // other tests at the same time.
    let incidents: Vec<_> = agent
        .incidents("")
        .into_iter()
        .filter(|i| uids.iter().any(|u| i["pod_uid"] == u.as_str()))
        .collect();
    assert!(incidents.is_empty(), "false incidents: {incidents:#?}");
    let (racing, refused) = control.expect("the control pod raced");
    assert!(refused > 0, "the control's app was never refused");
    let raced = agent.one_resolved_holding(&racing.uid, refused, Duration::from_secs(10));
    assert_eq!(
        (raced["phase"].as_str(), raced["refused_count"].as_u64()),
        (Some("startup"), Some(refused)),
        "the control race: {raced:#}"
    );
}
