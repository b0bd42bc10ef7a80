//! Agent restarts that go wrong (#50), on the real kernel with pins on a private
//! bpffs: a final checkpoint that cannot be written (a full state directory), a
//! `kill -9` after the listener came up (TCP or Unix socket), pins adopted without a checkpoint, and state
//! files that are not what they should be. Across each, nothing is counted twice, no
//! resolved race becomes `unresolved`, and the agent serves.

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant, SystemTime},
};

use serde_json::Value;
use sidecar_race_tests::{
    agent::RunAgent,
    bpf::{u64_map_of, wait_charge_points},
    flood::Flood,
    metrics_text::{poll_until, sum},
    pinned::PinnedPlace,
    pod::{Declared, SimContainer, SimPod, empty_pods_file, sibling_binary, write_pod_list},
    root::is_root_or_skip,
    scenario::{CountedApp, proxy},
};

/// A pinning agent reading the pods file `source`, with `extra` arguments.
fn agent(place: &PinnedPlace, source: &str, extra: &[&str]) -> RunAgent {
    place.agent(source, extra)
}

/// A pod (Deployment shop/checkout) with a proxy and an app container, listed in
/// `pods_file`; nothing runs in it yet.
fn pod(name: &str, pods_file: &Path) -> (SimPod, SimContainer, SimContainer) {
    let mut pod = SimPod::new(name).unwrap();
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    let manifest = pod.app_and_proxy_manifest("shop", "checkout", &a, &p, Declared::App);
    write_pod_list(pods_file, &[manifest]);
    (pod, p, a)
}

/// The app dialling 127.0.0.1:15001 every 100 ms, `attempts` times at most.
fn dial(pod: &mut SimPod, a: &SimContainer, attempts: u64) -> CountedApp {
    let attempts = attempts.to_string();
    CountedApp::start(
        pod,
        a,
        &sibling_binary("sr-app"),
        &[
            "--connect",
            "127.0.0.1:15001",
            "--interval-ms",
            "100",
            "--attempts",
            &attempts,
        ],
    )
}

/// The "incident resolved" lines (each a final accounting: a log line, a count in
/// the metrics, an Event) of `pod_uid` in a log.
fn settled(log: &[String], pod_uid: &str) -> Vec<Value> {
    log.iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["message"] == "incident resolved" && v["pod_uid"] == pod_uid)
        .collect()
}

/// Waits until `pred` holds, for at most `timeout`.
fn wait_until(what: &str, timeout: Duration, pred: impl Fn() -> bool) {
    let deadline = Instant::now() + timeout;
    while !pred() {
        assert!(Instant::now() < deadline, "{what} within {timeout:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The old agent tells the race resolved and is killed before a checkpoint knew of the
/// listener (`state_dir` still holds `written`). Returns what it told, and the step
/// that waits for the next agent to adopt its pins.
fn killed_after_telling(
    old: RunAgent,
    pod_uid: &str,
    written: &[u8],
    state_dir: &Path,
) -> (Value, impl FnOnce(RunAgent) -> RunAgent) {
    let told = old.wait_log(&["incident resolved", pod_uid], Duration::from_secs(4));
    let told: Value = serde_json::from_str(&told).unwrap();
    assert_eq!(told["state"], "resolved", "{told:#}");
    old.kill();
    assert_eq!(
        std::fs::read(state_dir.join("checkpoint.json")).unwrap(),
        written,
        "killed before a checkpoint that knew of the listener"
    );
    (told, |new: RunAgent| {
        new.wait_log(&["adopted the programs and maps"], Duration::from_secs(5));
        new
    })
}

/// Whether the checkpoint in `state_dir` holds an open incident of `pod_uid`.
fn checkpoint_has_open(state_dir: &Path, pod_uid: &str) -> bool {
    let Ok(bytes) = std::fs::read(state_dir.join("checkpoint.json")) else {
        return false;
    };
    let Ok(v) = serde_json::from_slice::<Value>(&bytes) else {
        return false;
    };
    v["state"]["detector"]["incidents"]
        .as_array()
        .is_some_and(|is| {
            is.iter()
                .any(|i| i["pod_uid"] == pod_uid && i["state"] == "open")
        })
}

/// A tmpfs of `bytes` mounted on `dir` for the test's life: a state directory that
/// fills up as a real disk does.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(dir: &Path, bytes: u64) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let c = |s: &str| std::ffi::CString::new(s).unwrap();
        let target = c(&dir.display().to_string());
        let opts = c(&format!("size={bytes},mode=0700"));
        // SAFETY: mount(2) with NUL-terminated strings.
        let r = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                opts.as_ptr().cast(),
            )
        };
        assert_eq!(r, 0, "mount tmpfs: {}", std::io::Error::last_os_error());
        Self(dir.to_path_buf())
    }

    /// Writes a file until the filesystem says it is full.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let path = self.0.join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        let chunk = vec![0u8; 4096];
        loop {
            if let Err(e) = f.write_all(&chunk).and_then(|()| f.sync_all()) {
                assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
                return path;
            }
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let target = std::ffi::CString::new(self.0.display().to_string()).unwrap();
        // SAFETY: umount2(2) with a NUL-terminated path.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

#[test]
fn a_final_checkpoint_on_a_full_disk_leaves_none_and_nothing_is_counted_twice() {
    if !is_root_or_skip(
        "a_final_checkpoint_on_a_full_disk_leaves_none_and_nothing_is_counted_twice",
    ) {
        return;
    }
    let place = PinnedPlace::new("full-disk");
    let disk = SmallDisk::mount(&place.state_dir, 1 << 20);
    let (pods_file, source) = empty_pods_file("full-disk");
    let (mut pod, _p, a) = pod("full-disk", &pods_file);
    // Nothing ever listens: the race ends `unresolved` 3 s after its first refusal.
    let quick = ["--unresolved-after-seconds", "3"];
    let old = agent(&place, &source, &quick);
    old.wait_log(&["programs and maps pinned"], Duration::from_secs(5));
    let started = Instant::now();
    // The first refusal 3 s into the agent's life: its periodic checkpoint (5 s)
    // holds the incident open, and it settles as `unresolved` at 6 s, before the
    // next one (10 s).
    std::thread::sleep(Duration::from_millis(3_000));
    let app = dial(&mut pod, &a, 90);
    wait_until(
        "a periodic checkpoint holding the open incident",
        Duration::from_secs(5),
        || checkpoint_has_open(&place.state_dir, &pod.uid),
    );
    old.wait_log(&["incident resolved", &pod.uid], Duration::from_secs(5));
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "settled before the next periodic checkpoint"
    );
    let filler = disk.fill();
    // Every refusal each agent counted into the pod's incidents (a final accounting
    // counts them in the metrics and Events; later ones are counted as they come).
    let uid = pod.uid.clone();
    let held = |agent: &RunAgent| -> u64 {
        agent
            .incidents_of(&uid)
            .iter()
            .map(|i| i["refused_count"].as_u64().unwrap())
            .sum()
    };
    let counted_before = held(&old);
    let old_log = old.stop();
    assert!(
        old_log
            .iter()
            .any(|l| l.contains("cannot write the checkpoint") && l.contains("No space left")),
        "the final save failed on the full disk: {old_log:#?}"
    );
    assert!(
        !place.state_dir.join("checkpoint.json").exists(),
        "the periodic checkpoint from before the incident settled is gone"
    );
    std::fs::remove_file(filler).unwrap();
    let new = agent(&place, &source, &quick);
    new.wait_log(&["adopted the programs and maps"], Duration::from_secs(5));
    let refused = app.refused(&mut pod);
    // The refusals the old one left in the ring, settled 3 s after the first.
    std::thread::sleep(Duration::from_secs(4));
    let counted_after = held(&new);
    let new_log = new.stop();
    eprintln!(
        "full disk at the stop: {counted_before} + {counted_after} of {refused} refusals \
         counted by the two agents"
    );
    assert!(
        counted_before + counted_after <= refused,
        "{counted_before} + {counted_after} refusals counted for {refused} made: the old \
         agent told {:#?}, the new one {:#?}",
        settled(&old_log, &pod.uid),
        settled(&new_log, &pod.uid)
    );
    drop(disk);
    let _ = std::fs::remove_file(pods_file);
}

#[test]
fn a_listener_a_killed_agent_took_with_it_still_resolves_the_race_once() {
    if !is_root_or_skip("a_listener_a_killed_agent_took_with_it_still_resolves_the_race_once") {
        return;
    }
    let place = PinnedPlace::new("killed-listen");
    let (pods_file, source) = empty_pods_file("killed-listen");
    let (mut pod, p, a) = pod("killed-listen", &pods_file);
    // The race would end `unresolved` 8 s after its first refusal.
    let quick = ["--unresolved-after-seconds", "8"];
    let old = agent(&place, &source, &quick);
    old.wait_log(&["programs and maps pinned"], Duration::from_secs(5));
    let app = dial(&mut pod, &a, 1_000);
    // The periodic checkpoint (5 s into the agent's life) holds the race open; then
    // the proxy listens, the agent reads it and tells the race, and is killed before
    // its next checkpoint: the listen went with it.
    wait_until(
        "a periodic checkpoint holding the open incident",
        Duration::from_secs(8),
        || checkpoint_has_open(&place.state_dir, &pod.uid),
    );
    let written = std::fs::read(place.state_dir.join("checkpoint.json")).unwrap();
    proxy(&mut pod, &p, &["--listen", "127.0.0.1:15001"]);
    let (told, adopted) = killed_after_telling(old, &pod.uid, &written, &place.state_dir);
    let new = adopted(agent(&place, &source, &quick));
    let refused = app.refused(&mut pod);
    // Well past the 8 s the race had.
    std::thread::sleep(Duration::from_secs(9));
    let incidents = new.incidents_of(&pod.uid);
    let new_log = new.stop();
    assert_eq!(incidents.len(), 1, "{incidents:#?}");
    let i = &incidents[0];
    assert_eq!(i["state"], "resolved", "{i:#}");
    assert_eq!(i["phase"], told["phase"], "never `unresolved`: {i:#}");
    assert!(
        i["refused_count"].as_u64().unwrap() <= refused,
        "{i:#} of {refused}"
    );
    assert!(
        settled(&new_log, &pod.uid).is_empty(),
        "told once, by the agent that read the listen: {:#?}",
        settled(&new_log, &pod.uid)
    );
    let _ = std::fs::remove_file(pods_file);
}

#[test]
fn pins_adopted_without_a_checkpoint_do_not_tell_old_suppressed_refusals_again() {
    if !is_root_or_skip(
        "pins_adopted_without_a_checkpoint_do_not_tell_old_suppressed_refusals_again",
    ) {
        return;
    }
    let place = PinnedPlace::new("suppressed-replay");
    let (pods_file, source) = empty_pods_file("suppressed-replay");
    let ns = format!("replay-{}", std::process::id());
    let old = agent(&place, &source, &[]);
    old.wait_log(&["programs and maps pinned"], Duration::from_secs(5));
    // Two flooding pods: one is deleted while no agent runs (made first, so the one
    // that stays has the newer cgroup ids), the other stays.
    let mut gone_pod = SimPod::new("replay-gone").unwrap();
    let g = gone_pod.container("flooder").unwrap();
    let mut kept_pod = SimPod::new("replay-kept").unwrap();
    let k = kept_pod.container("flooder").unwrap();
    let kept_manifest = kept_pod.app_manifest(&ns, &k);
    write_pod_list(
        &pods_file,
        &[gone_pod.app_manifest(&ns, &g), kept_manifest.clone()],
    );
    wait_charge_points(
        old.pid(),
        &[g.cgroup_id, k.cgroup_id],
        Duration::from_secs(30),
    );
    let start_at = SystemTime::now() + Duration::from_millis(500);
    let args = ["--ports", "16000-16099", "--hot", "9999"];
    let gone_flood = Flood::start(&mut gone_pod, &[&g], 2, &args, start_at);
    // A millisecond apart: each flood's count file is named after its start.
    let kept_at = start_at + Duration::from_millis(1);
    let kept_flood = Flood::start(&mut kept_pod, &[&k], 2, &args, kept_at);
    gone_flood.total(&mut gone_pod);
    kept_flood.total(&mut kept_pod);
    let series = format!(
        r#"sidecar_race_refusals_suppressed_total{{namespace="{ns}",workload_kind="Pod",workload="{}",container="flooder"}}"#,
        kept_manifest["metadata"]["name"].as_str().unwrap()
    );
    let told = poll_until(Duration::from_secs(30), || {
        let n = sum(&old.metrics(), &series);
        (n > 0).then_some(n)
    })
    .expect("the flood went over its container's budget");
    std::thread::sleep(Duration::from_secs(2)); // its last readings
    old.stop();
    // A userspace-only upgrade: the new build writes another checkpoint format but
    // keeps the kernel side's layout, so the pins are adopted and the checkpoint is not.
    let path = place.state_dir.join("checkpoint.json");
    let mut checkpoint: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    checkpoint["format"] = 99.into();
    std::fs::write(&path, serde_json::to_vec(&checkpoint).unwrap()).unwrap();
    let gone_cgroup = g.cgroup_id;
    drop(gone_pod);
    let new = agent(&place, &source, &[]);
    new.wait_log(&["adopted the programs and maps"], Duration::from_secs(5));
    new.wait_log(&["format 99"], Duration::from_secs(5));
    // Three readings of the kernel's counts.
    std::thread::sleep(Duration::from_secs(3));
    let retold = sum(&new.metrics(), &series);
    let entries = u64_map_of(new.pid(), "SUPPRESSED");
    new.stop();
    eprintln!("suppressed: {told} told by the old agent, {retold} again by the new one");
    assert_eq!(
        retold, 0,
        "nothing was suppressed since the old agent's last reading"
    );
    assert!(
        !entries.iter().any(|(cgroup, _)| *cgroup == gone_cgroup),
        "the entry of the pod deleted while no agent ran is gone: {entries:?}"
    );
    assert!(
        entries.iter().any(|(cgroup, _)| *cgroup == k.cgroup_id),
        "the live one's stays: {entries:?}"
    );
    let _ = std::fs::remove_file(pods_file);
}

/// Starts an agent on `place` whose state directory holds `name` as `make` leaves
/// it; returns its log once it serves.
fn serving_with(
    place: &PinnedPlace,
    source: &str,
    name: &str,
    make: impl Fn(&Path),
) -> Vec<String> {
    std::fs::create_dir_all(&place.state_dir).unwrap();
    let path = place.state_dir.join(name);
    let _ = std::fs::remove_file(&path);
    make(&path);
    // `RunAgent::start` waits for /readyz: an agent stuck in `open` or reading
    // without end never answers it.
    let a = agent(place, source, &[]);
    let incidents = a.incidents("");
    assert!(incidents.is_empty(), "{incidents:#?}");
    a.stop()
}

/// A FIFO, then a symlink to `/dev/zero`, as `name` in the state dir: each time the
/// agent serves, and one line of its log names what it found and says `then`.
fn odd_files_give_one_line(place: &PinnedPlace, source: &str, name: &str, then: &str) {
    for (make, kind) in [
        (mkfifo as fn(&Path), "a FIFO"),
        (dev_zero, "a character device"),
    ] {
        let log = serving_with(place, source, name, make);
        let said: Vec<&String> = log.iter().filter(|l| l.contains(kind)).collect();
        assert_eq!(said.len(), 1, "one line says why: {log:#?}");
        assert!(said[0].contains(then), "{}", said[0]);
    }
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo(3) with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

fn dev_zero(path: &Path) {
    std::os::unix::fs::symlink("/dev/zero", path).unwrap();
}

#[test]
fn a_fifo_or_dev_zero_as_the_checkpoint_gives_one_line_and_an_agent_that_serves() {
    if !is_root_or_skip(
        "a_fifo_or_dev_zero_as_the_checkpoint_gives_one_line_and_an_agent_that_serves",
    ) {
        return;
    }
    let place = PinnedPlace::new("state-files");
    let (pods_file, source) = empty_pods_file("state-files");
    odd_files_give_one_line(&place, &source, "checkpoint.json", "starting clean");
    let _ = std::fs::remove_file(pods_file);
}

#[test]
fn a_manifest_without_the_events_map_is_loaded_anew_with_one_line() {
    if !is_root_or_skip("a_manifest_without_the_events_map_is_loaded_anew_with_one_line") {
        return;
    }
    let place = PinnedPlace::new("short-manifest");
    let (pods_file, source) = empty_pods_file("short-manifest");
    agent(&place, &source, &[])
        .stop()
        .iter()
        .find(|l| l.contains("programs and maps pinned"))
        .expect("pinned");
    let keys = place.keys();
    let manifest = place.state_dir.join(format!("pinned-{}.json", keys[0]));
    let mut m: Value = serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    m["maps"]
        .as_array_mut()
        .unwrap()
        .retain(|map| map["name"] != "EVENTS");
    std::fs::write(&manifest, serde_json::to_vec(&m).unwrap()).unwrap();
    let a = agent(&place, &source, &[]);
    a.wait_log(&["programs and maps pinned"], Duration::from_secs(5));
    let log = a.stop();
    let said: Vec<&String> = log.iter().filter(|l| l.contains("EVENTS")).collect();
    assert_eq!(said.len(), 1, "one line says why: {log:#?}");
    assert!(said[0].contains("loading anew"), "{}", said[0]);
    let _ = std::fs::remove_file(pods_file);
}

#[test]
fn a_manifest_that_is_a_fifo_or_dev_zero_is_loaded_anew_with_one_line() {
    if !is_root_or_skip("a_manifest_that_is_a_fifo_or_dev_zero_is_loaded_anew_with_one_line") {
        return;
    }
    let place = PinnedPlace::new("odd-manifest");
    let (pods_file, source) = empty_pods_file("odd-manifest");
    agent(&place, &source, &[]).stop();
    let key = place.keys().remove(0);
    odd_files_give_one_line(
        &place,
        &source,
        &format!("pinned-{key}.json"),
        "loading anew",
    );
    let _ = std::fs::remove_file(pods_file);
}

/// A Unix socket race as [`a_listener_a_killed_agent_took_with_it_still_resolves_the_race_once`]
/// has it over TCP: the app dials `app-view/app.sock`, the proxy binds the same socket
/// on the shared volume at `vol/app.sock` after the agent's periodic checkpoint, the
/// agent reads and tells it and is killed. The next agent restores the race open and
/// finds the listener in the pod's Unix socket table: resolved, told once.
#[test]
fn a_unix_listener_a_killed_agent_took_with_it_still_resolves_the_race_once() {
    if !is_root_or_skip("a_unix_listener_a_killed_agent_took_with_it_still_resolves_the_race_once")
    {
        return;
    }
    let place = PinnedPlace::new("killed-unix");
    let (pods_file, source) = empty_pods_file("killed-unix");
    let dir = std::env::temp_dir().join(format!("sr-killed-unix-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (vol, view) = (dir.join("vol"), dir.join("app-view"));
    std::fs::create_dir_all(&vol).unwrap();
    std::os::unix::fs::symlink(&vol, &view).unwrap();
    let (vol, view) = (vol.display().to_string(), view.display().to_string());
    let mut pod = SimPod::new("killed-unix").unwrap();
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    let mut m = pod.app_and_proxy_manifest("shop", "checkout", &a, &p, Declared::App);
    m["spec"]["volumes"] = serde_json::json!([{"name": "sock", "emptyDir": {}}]);
    for c in m["spec"]["containers"].as_array_mut().unwrap() {
        let at = if c["name"] == "app" { &view } else { &vol };
        c["volumeMounts"] = serde_json::json!([{"name": "sock", "mountPath": at}]);
    }
    write_pod_list(&pods_file, &[m]);
    // This host's kernel has neither fexit nor kprobes: the syscall hooks (uds.rs).
    let quick = [
        "--unresolved-after-seconds",
        "8",
        "--unix-hooks",
        "syscalls",
    ];
    let old = agent(&place, &source, &quick);
    old.wait_log(&["programs and maps pinned"], Duration::from_secs(5));
    let sr_uds = sibling_binary("sr-uds");
    let dialed = format!("{view}/app.sock");
    let app = CountedApp::start(
        &mut pod,
        &a,
        &sr_uds,
        &[
            "connect",
            &dialed,
            "--interval-ms",
            "100",
            "--attempts",
            "1000",
        ],
    );
    wait_until(
        "a periodic checkpoint holding the open incident",
        Duration::from_secs(8),
        || checkpoint_has_open(&place.state_dir, &pod.uid),
    );
    let written = std::fs::read(place.state_dir.join("checkpoint.json")).unwrap();
    let mut listen = std::process::Command::new(&sr_uds);
    listen.args(["listen", &format!("{vol}/app.sock")]);
    pod.spawn(&p, listen).expect("start sr-uds listen");
    let (told, adopted) = killed_after_telling(old, &pod.uid, &written, &place.state_dir);
    let new = adopted(agent(&place, &source, &quick));
    let refused = app.refused(&mut pod);
    // Well past the 8 s the race had.
    std::thread::sleep(Duration::from_secs(9));
    let incidents = new.incidents_of(&pod.uid);
    let new_log = new.stop();
    let _ = std::fs::remove_file(pods_file);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(incidents.len(), 1, "{incidents:#?}");
    let i = &incidents[0];
    assert_eq!(i["state"], "resolved", "{i:#}");
    assert_eq!(i["phase"], told["phase"], "never `unresolved`: {i:#}");
    assert_eq!(i["socket"]["volume"], "sock", "{i:#}");
    assert!(
        i["refused_count"].as_u64().unwrap() <= refused,
        "{i:#} of {refused}"
    );
    assert!(
        new_log
            .iter()
            .any(|l| l.contains("a Unix socket listener the agent before this one saw")),
        "the listener was found in the table"
    );
    assert!(
        settled(&new_log, &pod.uid).is_empty(),
        "told once, by the agent that read the listen: {:#?}",
        settled(&new_log, &pod.uid)
    );
}
