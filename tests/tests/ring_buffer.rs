//! Exact counting: with a deliberately tiny ring buffer and the agent frozen, 20,000
//! refusals overflow it; the kernel counters still count every one, and every record
//! that did not arrive is accounted as lost. Its own test binary, so no other test's
//! refusals run at the same time.

use std::{process::Command, time::Duration};

use sidecar_race_tests::{
    agent::{TraceAgent, of},
    pod::{SimPod, require_binary, sibling_binary},
    root::is_root_or_skip,
};

const REFUSALS: u64 = 20_000;

#[test]
fn counters_stay_exact_when_the_ring_buffer_overflows() {
    if !is_root_or_skip("counters_stay_exact_when_the_ring_buffer_overflows") {
        return;
    }
    let page = 4096.to_string();
    // No refusal budget: every refusal is offered to the ring, which must overflow.
    let agent = TraceAgent::start(&[
        "--kinds",
        "refused",
        "--ring-buffer-bytes",
        &page,
        "--refusal-burst",
        "0",
    ]);
    let mut pod = SimPod::new("ring").unwrap();
    let c = pod.container("app").unwrap();

    // Freeze the reader so the one-page ring fills up for certain.
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(agent.pid() as i32, libc::SIGSTOP) };
    let mut app = Command::new(require_binary(&sibling_binary("sr-app")));
    app.args([
        "--connect",
        "127.0.0.1:15001",
        "--interval-ms",
        "0",
        "--attempts",
    ])
    .arg(REFUSALS.to_string());
    let pid = pod.spawn(&c, app).unwrap();
    assert!(pod.wait(pid).unwrap().success());
    // SAFETY: as above.
    unsafe { libc::kill(agent.pid() as i32, libc::SIGCONT) };
    std::thread::sleep(Duration::from_millis(500));

    let (lines, summary) = agent.stop();
    let ours = lines
        .iter()
        .filter(|v| of("refused", c.cgroup_id)(v))
        .count() as u64;
    let others = lines.len() as u64 - ours;
    let refused = &summary["kernel_events"]["refused"];
    let (seen, lost, delivered) = (
        refused["seen"].as_u64().unwrap(),
        refused["lost"].as_u64().unwrap(),
        refused["delivered"].as_u64().unwrap(),
    );
    eprintln!(
        "seen {seen}, lost {lost}, delivered {delivered} ({ours} ours, {others} from elsewhere)"
    );
    assert_eq!(seen, REFUSALS + others, "the kernel counted every refusal");
    assert_eq!(
        delivered + lost,
        seen,
        "every record is either delivered or counted lost"
    );
    assert_eq!(
        delivered,
        lines.len() as u64,
        "everything delivered was printed"
    );
    assert!(
        lost >= REFUSALS - 64,
        "a one-page ring holds a few dozen records, lost only {lost}"
    );
    assert_eq!(summary["dropped_in_agent"], 0);
    assert_eq!(refused["suppressed"], 0, "no budget, nothing suppressed");
}
