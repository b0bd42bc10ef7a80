//! A race seen partly by one agent and partly by the next, through a checkpoint file,
//! counts as one; what one published the other does not; a checkpoint that is not
//! this boot's, not this format or not whole starts the agent clean.

use std::time::Duration;

use super::*;
use crate::{
    daemon::checkpoint::{self as daemon, Restore},
    detect::render::Filter,
    detect::{DetectorConfig, Incident, Phase, State, timeline::EntryKind},
    ingest::events::KernelEvent,
    inventory::{Inventory, cgroups::CgroupIndex, store::PodStore},
    pipeline::{Pipeline, outcome::Outcome},
    pods::pod_info::PodInfo,
    test_facts::{
        CHECKOUT, MS, OTHER_POD, checkout_pod, container_path, created, pod_path, socket, temp_dir,
    },
};

const APP: u64 = 101;
const PROXY: u64 = 102;

/// The checkout pod's cgroups, as a scan of the tree finds them.
fn cgroups() -> Vec<(u64, String)> {
    vec![
        (100, pod_path(CHECKOUT)),
        (APP, container_path(CHECKOUT, &"a".repeat(64))),
        (PROXY, container_path(CHECKOUT, &"b".repeat(64))),
    ]
}

/// An agent's pipeline with the checkout pod named by the pod source, its cgroup tree
/// scanned at start (`scanned`), and a reorder window.
fn agent(name: &str, window_ns: u64, scanned: &[(u64, String)]) -> Pipeline {
    agent_listing(name, window_ns, scanned, Some(checkout_pod()))
}

/// [`agent`] whose pod source lists `pod` (none: nothing).
fn agent_listing(
    name: &str,
    window_ns: u64,
    scanned: &[(u64, String)],
    pod: Option<PodInfo>,
) -> Pipeline {
    let mut store = PodStore::new(Duration::from_secs(600));
    pod.into_iter().for_each(|p| store.apply(p));
    let mut index = CgroupIndex::new(temp_dir(name), u64::MAX);
    for (id, path) in scanned {
        index.created(*id, path);
    }
    let inventory = Inventory::new(index, store, true);
    Pipeline::new(inventory, DetectorConfig::default(), window_ns)
        .with_metadata_wait(Duration::from_secs(10), None)
}

fn feed(p: &mut Pipeline, events: &[KernelEvent]) {
    events.iter().for_each(|ev| p.kernel_event(ev));
}

fn refused(ts: u64, port: u16) -> KernelEvent {
    KernelEvent::Refused(socket(
        ts,
        APP,
        "127.0.0.1:40000",
        Some(&format!("127.0.0.1:{port}")),
    ))
}

fn listen(ts: u64, port: u16) -> KernelEvent {
    KernelEvent::Listen(socket(ts, PROXY, &format!("0.0.0.0:{port}"), None))
}

fn started() -> Vec<KernelEvent> {
    cgroups()
        .into_iter()
        .enumerate()
        .map(|(i, (id, path))| created(i as u64 * MS, id, path))
        .collect()
}

fn incidents(p: &Pipeline) -> Vec<Incident> {
    p.detector().incidents().newest_first().cloned().collect()
}

/// (opened, settled) outcomes of incident `id`.
fn told(outcomes: &[Outcome], id: u64) -> (usize, usize) {
    let opened = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Opened(v) if v.id == id))
        .count();
    let settled = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Settled(a) if a.view.id == id))
        .count();
    (opened, settled)
}

/// Refusals of incident `id` its outcomes count (for metrics).
fn counted(outcomes: &[Outcome], id: u64) -> u64 {
    outcomes
        .iter()
        .filter_map(|o| match o {
            Outcome::Settled(a) | Outcome::LateRefusals(a) if a.view.id == id => {
                Some(a.new_refusals)
            }
            _ => None,
        })
        .sum()
}

/// Through a real file: written by the old agent, read by the new one.
fn hand_over(
    old: &Pipeline,
    name: &str,
    new: &mut Pipeline,
    now: u64,
) -> crate::pipeline::Restored {
    let file = CheckpointFile::with_boot_id(temp_dir(name).join("checkpoint.json"), "boot-1");
    file.save(&mut old.snapshot(), now, true).unwrap();
    let loaded = file.load(now + MS).unwrap();
    new.restore(loaded.state, now + MS)
}

#[test]
fn a_startup_race_seen_by_two_agents_is_one_incident_with_its_whole_count_and_window() {
    let mut old = agent("ckpt-old", 5 * MS, &[]);
    feed(&mut old, &started());
    feed(
        &mut old,
        &(10..30)
            .map(|ms| refused(ms * MS, 15001))
            .collect::<Vec<_>>(),
    );
    // Refusals up to 24 ms reached the detector; the last five wait in the window.
    let before = old.tick(30 * MS);
    let [inc] = &incidents(&old)[..] else {
        panic!("one incident in the old agent")
    };
    assert_eq!((inc.state, inc.refused_count), (State::Open, 15));
    assert_eq!(old.snapshot().summary().reorder_facts, 5);
    assert_eq!(told(&before, inc.id), (1, 0), "opened by the old agent");

    let mut new = agent("ckpt-new", 5 * MS, &cgroups());
    let restored = hand_over(&old, "ckpt-rt", &mut new, 31 * MS);
    assert_eq!((restored.dead_pods, restored.dead_facts), (0, 0));
    assert_eq!(restored.summary.open_incidents, 1);
    // The rest of the ring: 30 more refusals, then the proxy listens.
    feed(
        &mut new,
        &(30..60)
            .map(|ms| refused(ms * MS, 15001))
            .collect::<Vec<_>>(),
    );
    feed(&mut new, &[listen(61 * MS, 15001)]);
    let mut after = new.tick(62 * MS);
    after.extend(new.flush(200 * MS));

    let [race] = &incidents(&new)[..] else {
        panic!("one incident in the new agent: {:#?}", incidents(&new))
    };
    assert_eq!(race.id, inc.id);
    assert_eq!((race.phase, race.state), (Phase::Startup, State::Resolved));
    assert_eq!(race.refused_count, 50);
    assert_eq!(race.first_refused_at, 10 * MS);
    assert_eq!(race.listener_ready_at, Some(61 * MS));
    assert_eq!(race.race_window_ns(), Some(51 * MS));
    // The timeline the old agent began goes on in the new one: one tally of the
    // refusals both agents counted, then the listen.
    let tail: Vec<(EntryKind, u64, u64)> = race
        .timeline
        .entries()
        .iter()
        .filter(|e| e.kind != EntryKind::ContainerStarted)
        .map(|e| (e.kind, e.at, e.count))
        .collect();
    assert_eq!(
        tail,
        [
            (EntryKind::FirstRefusal, 10 * MS, 1),
            (EntryKind::LastRefusal, 59 * MS, 49),
            (EntryKind::Listening, 61 * MS, 0),
        ]
    );
    assert!(race.timeline.has(EntryKind::ContainerStarted, None));
    assert_eq!(
        told(&after, race.id),
        (0, 1),
        "settled once, by the new agent"
    );
}

#[test]
fn what_the_old_agent_published_the_new_one_does_not_publish_again() {
    let mut old = agent("ckpt-pub-old", 0, &[]);
    feed(&mut old, &started());
    feed(
        &mut old,
        &(10..20)
            .map(|ms| refused(ms * MS, 15001))
            .collect::<Vec<_>>(),
    );
    feed(&mut old, &[listen(21 * MS, 15001)]);
    let outcomes = old.tick(2_000 * MS);
    let id = incidents(&old)[0].id;
    assert_eq!(
        told(&outcomes, id),
        (1, 1),
        "opened and settled by the old agent"
    );

    let mut new = agent("ckpt-pub-new", 0, &cgroups());
    let restored = hand_over(&old, "ckpt-pub", &mut new, 2_001 * MS);
    assert!(restored.outcomes.is_empty());
    assert!(new.is_settled(id), "still settled");
    let mut outcomes = new.tick(3_000 * MS);
    outcomes.extend(new.flush(4_000 * MS));
    assert_eq!(told(&outcomes, id), (0, 0), "{outcomes:#?}");
    assert_eq!(counted(&outcomes, id), 0);
    assert_eq!(incidents(&new).len(), 1, "still in the history");
}

#[test]
fn pods_gone_from_the_node_are_ended_and_dropped_at_restore() {
    let mut old = agent("ckpt-dead-old", 0, &[]);
    let other = (200, container_path(OTHER_POD, &"c".repeat(64)));
    feed(&mut old, &started());
    feed(&mut old, &[created(2 * MS, other.0, other.1.clone())]);
    feed(&mut old, &[refused(10 * MS, 15001)]);
    feed(
        &mut old,
        &[KernelEvent::Refused(socket(
            11 * MS,
            200,
            "127.0.0.1:40001",
            Some("127.0.0.1:8080"),
        ))],
    );
    old.tick(20 * MS);
    assert_eq!(old.detector().tracked_pods(), 2);

    // The other pod went while no agent ran: the new scan finds only the checkout pod.
    let mut new = agent("ckpt-dead-new", 0, &cgroups());
    let restored = hand_over(&old, "ckpt-dead", &mut new, 21 * MS);
    assert_eq!(restored.dead_pods, 1);
    let tracked: Vec<&str> = new.detector().tracked_pod_uids().collect();
    assert_eq!(tracked, [CHECKOUT]);
    for inc in incidents(&new) {
        let open = inc.state == State::Open;
        assert_eq!(open, inc.pod_uid == CHECKOUT, "{inc:#?}");
    }
}

/// A pod deleted while no agent ran is listed to the next agent by no pod source: its
/// incident keeps the names the checkpoint carried, as the old agent showed them.
#[test]
fn an_incident_of_a_pod_deleted_between_agents_keeps_its_names() {
    let mut old = agent("ckpt-names-old", 0, &[]);
    feed(&mut old, &started());
    feed(&mut old, &[refused(10 * MS, 15001)]);
    old.tick(20 * MS);
    let named = |p: &Pipeline| -> Vec<serde_json::Value> {
        let (list, _) = p.incidents(&Filter::default(), 10);
        list.iter()
            .map(|v| {
                let v = serde_json::to_value(v).unwrap();
                serde_json::json!([
                    v["namespace"],
                    v["pod"],
                    v["workload"],
                    v["container"],
                    v["sidecar"],
                    v["pattern"],
                    v["container_role"]
                ])
            })
            .collect()
    };
    let before = named(&old);
    assert_eq!(before.len(), 1);
    assert!(before[0][0].is_string(), "{before:?}");

    let mut new = agent_listing("ckpt-names-new", 0, &[], None);
    let restored = hand_over(&old, "ckpt-names", &mut new, 21 * MS);
    assert_eq!(restored.dead_pods, 1, "its cgroups went with it");
    assert_eq!(named(&new), before);
}

#[test]
fn over_the_cap_the_oldest_published_incidents_go_first_and_never_a_cut_file() {
    let mut p = agent("ckpt-cap", 0, &[]);
    feed(&mut p, &started());
    // An open race first (the oldest incident), then 100 settled ones.
    feed(&mut p, &[refused(5 * MS, 15001)]);
    for i in 0..100u16 {
        let t = (10 + u64::from(i) * 3) * MS;
        feed(
            &mut p,
            &[refused(t, 20_000 + i), listen(t + MS, 20_000 + i)],
        );
    }
    p.tick(1_000 * MS);
    let all = incidents(&p);
    assert_eq!(all.len(), 101);
    let (oldest, newest) = (all.last().unwrap().id, all[0].id);

    let dir = temp_dir("ckpt-cap-file");
    let path = dir.join("checkpoint.json");
    let full = CheckpointFile::with_boot_id(&path, "b")
        .save(&mut p.snapshot(), 1_000 * MS, true)
        .unwrap();
    assert_eq!(full.dropped_incidents, 0);
    let cap = full.bytes * 3 / 4;
    let file = CheckpointFile::with_boot_id(&path, "b").with_cap(cap);
    let saved = file.save(&mut p.snapshot(), 1_000 * MS, true).unwrap();
    assert!(saved.dropped_incidents > 0);
    assert!(saved.bytes <= cap && std::fs::metadata(&path).unwrap().len() as usize == saved.bytes);
    let mut next = agent("ckpt-cap-new", 0, &cgroups());
    next.restore(file.load(1_001 * MS).unwrap().state, 1_001 * MS);
    let kept = incidents(&next);
    assert_eq!(kept.len(), 101 - saved.dropped_incidents);
    assert!(kept.iter().any(|i| i.id == newest), "the newest stay");
    assert!(
        kept.iter()
            .any(|i| i.id == oldest && i.state == State::Open),
        "open ones stay"
    );
    assert!(
        !kept.iter().any(|i| i.id == oldest + 1),
        "the oldest published went"
    );

    // Too large even without published incidents: nothing is written, and the
    // checkpoint before goes (see `a_save_that_fails_removes_the_checkpoint_before_it`).
    let tiny = CheckpointFile::with_boot_id(&path, "b").with_cap(200);
    assert!(matches!(
        tiny.save(&mut p.snapshot(), 1_000 * MS, true),
        Err(SaveError::TooLarge { cap: 200, .. })
    ));
    assert!(!path.exists(), "no cut file, and no earlier one");
}

/// A checkpoint of the checkout race, written in boot `boot-1`.
fn written(name: &str) -> (CheckpointFile, Pipeline) {
    let mut p = agent(&format!("{name}-old"), 0, &[]);
    feed(&mut p, &started());
    feed(&mut p, &[refused(10 * MS, 15001)]);
    p.tick(20 * MS);
    let file = CheckpointFile::with_boot_id(temp_dir(name).join("checkpoint.json"), "boot-1");
    file.save(&mut p.snapshot(), 20 * MS, true).unwrap();
    (file, p)
}

/// The daemon's restore into a fresh agent: what it says, and that it started clean and
/// removed the file.
fn start_with(file: &CheckpointFile, name: &str) -> Restore {
    let mut p = agent(name, 0, &cgroups());
    let r = daemon::restore(file, &mut p, 30 * MS, false);
    assert!(!file.path().exists(), "read once");
    if !r.is_restored() {
        assert!(incidents(&p).is_empty() && p.detector().tracked_pods() == 0);
    }
    r
}

#[test]
fn a_periodic_checkpoint_is_told_from_the_last_one_a_stop_writes() {
    let (file, p) = written("ckpt-periodic");
    assert!(
        file.load(30 * MS).unwrap().header.last,
        "written at the stop"
    );
    file.save(&mut p.snapshot(), 25 * MS, false).unwrap();
    let loaded = file.load(30 * MS).unwrap();
    assert!(
        !loaded.header.last,
        "a periodic one: its agent may have read more"
    );
    assert_eq!(loaded.header.written_at_boot_ns, 25 * MS);
}

#[test]
fn a_checkpoint_of_this_boot_is_restored_once() {
    let (file, _) = written("ckpt-ok");
    let r = start_with(&file, "ckpt-ok-new");
    assert!(r.is_restored(), "{r:?}");
    assert!(matches!(
        start_with(&file, "ckpt-ok-again"),
        Restore::Missing
    ));
}

#[test]
fn a_checkpoint_of_another_boot_starts_the_agent_clean() {
    let (file, _) = written("ckpt-boot");
    let other = CheckpointFile::with_boot_id(file.path(), "boot-2");
    assert!(matches!(
        other.load(30 * MS),
        Err(LoadError::Stale {
            why: Stale::OtherBoot { .. },
            ..
        })
    ));
    let Restore::Discarded(why) = start_with(&other, "ckpt-boot-new") else {
        panic!("discarded")
    };
    assert!(why.contains("another boot"), "{why}");
}

#[test]
fn a_checkpoint_of_another_format_starts_the_agent_clean() {
    let (file, _) = written("ckpt-format");
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(file.path()).unwrap()).unwrap();
    json["format"] = 99.into();
    std::fs::write(file.path(), serde_json::to_vec(&json).unwrap()).unwrap();
    assert!(matches!(
        file.load(30 * MS),
        Err(LoadError::Stale {
            why: Stale::OtherFormat { found: 99 },
            ..
        })
    ));
    let Restore::Discarded(why) = start_with(&file, "ckpt-format-new") else {
        panic!("discarded")
    };
    assert!(why.contains("format 99"), "{why}");
}

#[test]
fn a_cut_or_garbled_checkpoint_starts_the_agent_clean() {
    let (file, _) = written("ckpt-cut");
    let bytes = std::fs::read(file.path()).unwrap();
    std::fs::write(file.path(), &bytes[..bytes.len() / 2]).unwrap();
    assert!(matches!(file.load(30 * MS), Err(LoadError::Corrupt { .. })));
    let Restore::Discarded(why) = start_with(&file, "ckpt-cut-new") else {
        panic!("discarded")
    };
    assert!(why.contains("corrupt"), "{why}");
    std::fs::write(file.path(), b"{\"magic\": \"something else\"}").unwrap();
    assert!(matches!(file.load(30 * MS), Err(LoadError::Corrupt { .. })));
    // A state whose header is right but whose body is not the state.
    let mut json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    json["state"] = serde_json::json!({"detector": 1});
    std::fs::write(file.path(), serde_json::to_vec(&json).unwrap()).unwrap();
    assert!(matches!(file.load(30 * MS), Err(LoadError::Corrupt { .. })));
}

#[test]
fn no_checkpoint_is_a_clean_start_without_a_warning() {
    let file = CheckpointFile::with_boot_id(temp_dir("ckpt-none").join("checkpoint.json"), "b");
    assert!(matches!(file.load(0), Err(LoadError::Missing(_))));
    assert!(matches!(
        start_with(&file, "ckpt-none-new"),
        Restore::Missing
    ));
}

#[test]
fn a_fifo_or_a_symlink_to_dev_zero_starts_the_agent_clean_at_once() {
    let file = CheckpointFile::with_boot_id(temp_dir("ckpt-fifo").join("checkpoint.json"), "b");
    let c = std::ffi::CString::new(file.path().as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo(3) with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // No writer ever comes: an `open` that waited for one would hang here.
    let Restore::Discarded(why) = start_with(&file, "ckpt-fifo-new") else {
        panic!("discarded")
    };
    assert!(why.contains("a FIFO, not a regular file"), "{why}");
    let file = CheckpointFile::with_boot_id(temp_dir("ckpt-zero").join("checkpoint.json"), "b");
    std::os::unix::fs::symlink("/dev/zero", file.path()).unwrap();
    // Read to its end, /dev/zero would take all the memory there is.
    let Restore::Discarded(why) = start_with(&file, "ckpt-zero-new") else {
        panic!("discarded")
    };
    assert!(why.contains("a character device"), "{why}");
    assert!(
        Path::new("/dev/zero").exists(),
        "the link went, not its target"
    );
}

#[test]
fn a_save_that_fails_removes_the_checkpoint_before_it() {
    // Over the cap even without published incidents: nothing can be written.
    let (file, p) = written("ckpt-fail-cap");
    let small = CheckpointFile::with_boot_id(file.path(), "boot-1").with_cap(16);
    let err = small.save(&mut p.snapshot(), 25 * MS, true).unwrap_err();
    assert!(matches!(err, SaveError::TooLarge { .. }), "{err}");
    assert!(
        !file.path().exists(),
        "the periodic checkpoint before would be restored past what this agent published"
    );
    // The write itself fails (its temporary file cannot be made).
    let (file, p) = written("ckpt-fail-write");
    let tmp = format!("checkpoint.json.tmp.{}", std::process::id());
    std::fs::create_dir(file.path().with_file_name(tmp)).unwrap();
    let err = file.save(&mut p.snapshot(), 25 * MS, true).unwrap_err();
    assert!(matches!(err, SaveError::Write { .. }), "{err}");
    assert!(!file.path().exists());
    assert!(matches!(file.load(30 * MS), Err(LoadError::Missing(_))));
}
