//! Every kernel LRU table, filled: it degrades as SECURITY.md says (the least recently
//! used entries go) and the agent counts what it dropped in
//! `sidecar_race_kernel_table_entries_gone_total{table=…}`. The agent runs with every
//! LRU table shrunk to `ENTRIES` (`--kernel-lru-entries`), so a pod of this test fills
//! one without flooding the agents of other tests on the node; the code paths are the
//! full-size tables' own.
//!
//! Each table has its own test function. Other processes on the node use the tables
//! too (every agent sees the whole node), so a count may be higher than this test's
//! share, never lower: the assertions are lower bounds, at least the entries that a
//! table of `ENTRIES` could not hold. (The kernel evicts in batches of up to 128 per
//! CPU, so a small table often counts more.)

use std::{path::PathBuf, process::Command, sync::Mutex, time::Duration};

use sidecar_race_tests::{
    agent::RunAgent,
    bpf::wait_charge_points,
    metrics_text::{poll_until, sum},
    pod::{
        Declared, SimContainer, SimPod, empty_pods_file, require_binary, sibling_binary,
        write_pod_list,
    },
    root::is_root_or_skip,
};

/// Entries of each kernel LRU table in these tests.
const ENTRIES: u32 = 256;
/// What each test puts in a table: well past `ENTRIES`.
const FILL: u32 = 400;
const SETTLE: Duration = Duration::from_secs(20);

/// One filling at a time: each test reads counters of the whole node.
static TURN: Mutex<()> = Mutex::new(());

/// An agent with small LRU tables and a pod it knows, to fill them from.
struct Filler {
    agent: RunAgent,
    pod: SimPod,
    container: SimContainer,
    /// A second container, for a listener the filler's connects are refused by.
    server: SimContainer,
    pods_file: PathBuf,
}

impl Filler {
    fn start(name: &str) -> Self {
        let (pods_file, source) = empty_pods_file(&format!("lru-{name}"));
        let agent = RunAgent::start(&[
            "--pods-from",
            &source,
            "--pods-poll-seconds",
            "0.1",
            "--kernel-lru-entries",
            &ENTRIES.to_string(),
        ]);
        let mut pod = SimPod::new(name).unwrap();
        let container = pod.container("filler").unwrap();
        let server = pod.container("server").unwrap();
        let ns = format!("lru-{}", std::process::id());
        let manifest = pod.app_and_proxy_manifest(&ns, name, &container, &server, Declared::App);
        write_pod_list(&pods_file, std::slice::from_ref(&manifest));
        // The agent marks the container for the kernel once it has seen its cgroup.
        wait_charge_points(agent.pid(), &[container.cgroup_id], SETTLE);
        Self {
            agent,
            pod,
            container,
            server,
            pods_file,
        }
    }

    /// Runs `sr-fill args` in the pod's filler container to its end; it must succeed.
    fn fill(&mut self, args: &[&str]) {
        let filler = self.container.clone();
        self.fill_from(&filler, args);
    }

    fn fill_from(&mut self, c: &SimContainer, args: &[&str]) {
        let mut cmd = Command::new(require_binary(&sibling_binary("sr-fill")));
        cmd.args(args);
        let pid = self.pod.spawn(c, cmd).unwrap();
        assert!(
            self.pod.wait(pid).unwrap().success(),
            "sr-fill {args:?} failed"
        );
    }

    fn gone(&self, table: &str) -> u64 {
        sum(
            &self.agent.metrics(),
            &format!(r#"sidecar_race_kernel_table_entries_gone_total{{table="{table}"}}"#),
        )
    }

    /// Waits until `table` has counted at least `at_least` more entries gone than
    /// `before`; what it counted.
    fn wait_gone(&self, table: &str, before: u64, at_least: u64) -> u64 {
        poll_until(SETTLE, || {
            let n = self.gone(table) - before;
            (n >= at_least).then_some(n)
        })
        .unwrap_or_else(|| {
            panic!(
                "the full {table} table counted {} entries gone, fewer than the {at_least} \
                 it could not hold:\n{}",
                self.gone(table) - before,
                self.agent.metrics()
            )
        })
    }
}

impl Drop for Filler {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.pods_file);
    }
}

fn turn() -> std::sync::MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn a_full_connecting_table_forgets_the_oldest_connects_and_counts_them() {
    if !is_root_or_skip("a_full_connecting_table_forgets_the_oldest_connects_and_counts_them") {
        return;
    }
    let _turn = turn();
    let mut f = Filler::start("lru-connecting");
    let before = f.gone("connecting");
    // FILL connects wait in SYN_SENT at once, then are refused (by a listener in the
    // pod's other container that closed): a socket whose entry the full table evicted
    // is refused unseen, and counted as gone when it leaves SYN_SENT.
    let (server, filler) = (f.server.clone(), f.container.clone());
    let client_cgroup = filler.cgroup_dir.display().to_string();
    f.fill_from(
        &server,
        &["connecting", &FILL.to_string(), "15300", &client_cgroup],
    );
    let gone = f.wait_gone("connecting", before, u64::from(FILL - ENTRIES));
    eprintln!("connecting: {gone} of {FILL} connects refused without their entry");
}

#[test]
fn a_full_listening_table_forgets_the_oldest_listeners_and_counts_them() {
    if !is_root_or_skip("a_full_listening_table_forgets_the_oldest_listeners_and_counts_them") {
        return;
    }
    let _turn = turn();
    let mut f = Filler::start("lru-listening");
    let before = f.gone("listening");
    // FILL listeners open at once, then close: the oldest ones' entries are gone.
    f.fill(&["listening", &FILL.to_string(), "20000"]);
    let gone = f.wait_gone("listening", before, u64::from(FILL - ENTRIES));
    eprintln!("listening: {gone} of {FILL} listeners closed without their entry");
    assert_nothing_lost(&f.agent);
}

#[test]
fn a_full_local_refusals_table_evicts_unused_entries_and_counts_them() {
    if !is_root_or_skip("a_full_local_refusals_table_evicts_unused_entries_and_counts_them") {
        return;
    }
    let _turn = turn();
    let mut f = Filler::start("lru-local-refusals");
    let before = f.gone("local_refusals");
    // FILL SYNs to a closed port that no socket sent: the local stack refuses each and
    // its record waits for a reset no socket takes; the oldest are evicted unused.
    f.fill(&["syn-scan", &FILL.to_string(), "15400"]);
    let gone = f.wait_gone("local_refusals", before, u64::from(FILL - ENTRIES));
    eprintln!("local_refusals: {gone} of {FILL} local refusals evicted unused");
}

#[test]
fn a_full_budget_table_forgets_the_least_recent_cgroups_and_counts_them() {
    if !is_root_or_skip("a_full_budget_table_forgets_the_least_recent_cgroups_and_counts_them") {
        return;
    }
    let _turn = turn();
    let mut f = Filler::start("lru-budget");
    // FILL cgroups that are no container (each pays for itself) refuse once each.
    let parent = sidecar_race_agent::kernel::cgroup2::find_cgroup2()
        .unwrap()
        .join(format!("sr-lru-budget-{}", std::process::id()));
    let dirs = make_cgroups(&parent, FILL);
    let before = f.gone("budget");
    let mut args = vec!["cgroups".to_string(), "15500".into(), "refuse".into()];
    args.extend(dirs.iter().map(|d| d.display().to_string()));
    f.fill(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let gone = f.wait_gone("budget", before, u64::from(FILL - ENTRIES));
    eprintln!("budget: {gone} budgets of {FILL} cgroups forgotten");
    remove_cgroups(&parent, &dirs);
}

#[test]
fn a_full_control_budget_table_forgets_the_least_recent_containers_and_counts_them() {
    if !is_root_or_skip(
        "a_full_control_budget_table_forgets_the_least_recent_containers_and_counts_them",
    ) {
        return;
    }
    let _turn = turn();
    let mut f = Filler::start("lru-control-budget");
    // Control budgets are kept for containers only: FILL containers of one pod make
    // one listener each.
    let containers: Vec<SimContainer> = (0..FILL)
        .map(|i| {
            // Paced: every agent on the node gets a record per cgroup made.
            std::thread::sleep(Duration::from_millis(3));
            f.pod.container(&format!("c{i}")).unwrap()
        })
        .collect();
    let ids: Vec<u64> = containers.iter().map(|c| c.cgroup_id).collect();
    wait_charge_points(f.agent.pid(), &ids, SETTLE);
    let before = f.gone("control_budget");
    let mut args = vec!["cgroups".to_string(), "21000".into(), "listen".into()];
    args.extend(
        containers
            .iter()
            .map(|c| c.cgroup_dir.display().to_string()),
    );
    f.fill(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let gone = f.wait_gone("control_budget", before, u64::from(FILL - ENTRIES));
    eprintln!("control_budget: {gone} budgets of {FILL} containers forgotten");
    assert_nothing_lost(&f.agent);
}

fn make_cgroups(parent: &std::path::Path, n: u32) -> Vec<PathBuf> {
    std::fs::create_dir_all(parent).unwrap();
    (0..n)
        .map(|i| {
            let d = parent.join(format!("c{i}"));
            std::fs::create_dir(&d).unwrap();
            // Paced: every agent on the node gets a record per cgroup made.
            std::thread::sleep(Duration::from_millis(3));
            d
        })
        .collect()
}

fn remove_cgroups(parent: &std::path::Path, dirs: &[PathBuf]) {
    for d in dirs {
        let _ = std::fs::remove_dir(d);
    }
    let _ = std::fs::remove_dir(parent);
}

/// No record was lost to a full ring: the control budget held the filler back.
fn assert_nothing_lost(agent: &RunAgent) {
    let body = agent.metrics();
    assert_eq!(
        sum(&body, "sidecar_race_kernel_events_lost_total"),
        0,
        "records lost to a full ring:\n{body}"
    );
}
