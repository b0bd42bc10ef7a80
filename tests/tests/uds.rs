//! Unix socket races end to end on the real kernel: simulated pods whose sidecar
//! serves on a Unix socket, the agent binary run as users run it, and what
//! `/api/v1/incidents` and `/metrics` then say.

use std::{path::PathBuf, time::Duration};

use serde_json::{Value, json};
use sidecar_race_tests::{
    agent::RunAgent,
    pod::{
        Declared, SimContainer, SimPod, empty_pods_file, mark_deleting, require_binary,
        sibling_binary, write_pod_list,
    },
    root::is_root_or_skip,
    scenario::CountedApp,
};

const SETTLE: Duration = Duration::from_secs(15);

/// A directory for one test's socket files (the "emptyDir" on the host).
fn volume_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sr-uds-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("vol")).expect("volume directory");
    dir
}

fn sr_uds() -> PathBuf {
    require_binary(&sibling_binary("sr-uds"))
}

/// Starts `sr-uds` with `args` in container `c`; its pid.
fn spawn(pod: &mut SimPod, c: &SimContainer, args: &[&str]) -> u32 {
    let mut cmd = std::process::Command::new(sr_uds());
    cmd.args(args);
    pod.spawn(c, cmd).expect("start sr-uds")
}

/// Runs an `sr-uds` client to completion in `c`: how many of its attempts were refused.
fn client(pod: &mut SimPod, c: &SimContainer, args: &[&str]) -> u64 {
    CountedApp::start(pod, c, &sr_uds(), args).refused(pod)
}

/// The Deployment shop/checkout's pod with `app` and a classic sidecar `proxy`, both
/// mounting volume `sock`: the app at `app_mount`, the proxy at `proxy_mount`.
fn manifest(
    pod: &SimPod,
    a: &SimContainer,
    p: &SimContainer,
    app_mount: &str,
    proxy_mount: &str,
) -> Value {
    let mut m = pod.app_and_proxy_manifest("shop", "checkout", a, p, Declared::App);
    m["spec"]["volumes"] = json!([{"name": "sock", "emptyDir": {}}]);
    for c in m["spec"]["containers"].as_array_mut().expect("containers") {
        let at = if c["name"] == "app" {
            app_mount
        } else {
            proxy_mount
        };
        c["volumeMounts"] = json!([{"name": "sock", "mountPath": at}]);
    }
    m
}

/// The Unix hooks every agent here runs with. This host's kernel refuses `fexit` and
/// has no kprobes, so `auto` attaches no Unix hook at all: the tests ask for the
/// syscall tracepoints, which see the same races (the kernel tier proves `fexit` and
/// kprobes on the LTS kernels).
const UNIX_HOOKS: [&str; 2] = ["--unix-hooks", "syscalls"];

/// The agent reading a pods file that lists `pod` (watching before the pod starts).
fn agent_with(name: &str) -> (RunAgent, PathBuf) {
    RunAgent::start_with_pods_file(&format!("uds-{name}"), &UNIX_HOOKS)
}

/// [`agent_with`], the agent started by `start` with its arguments.
fn agent_started_by(name: &str, start: fn(&[&str]) -> RunAgent) -> (RunAgent, PathBuf) {
    let (pods_file, source) = empty_pods_file(&format!("uds-{name}"));
    let mut args = vec!["--pods-from", &source, "--pods-poll-seconds", "0.1"];
    args.extend_from_slice(&UNIX_HOOKS);
    (start(&args), pods_file)
}

/// A late bind, as the pod's two containers see it.
struct LateBind {
    pod: SimPod,
    app: SimContainer,
    proxy: SimContainer,
    /// How many of the app's connects were refused.
    refused: u64,
    /// The pod's one resolved incident, once it holds them all.
    incident: Value,
}

/// A pod whose `app` and `proxy` mount volume `sock` at `app_dir` and `proxy_dir`,
/// listed for `agent`; the proxy binds `app.sock` `delay_ms` late while the app dials
/// it every 50 ms until it gets through.
fn late_bind(
    agent: &RunAgent,
    pods_file: &std::path::Path,
    name: &str,
    app_dir: &str,
    proxy_dir: &str,
    delay_ms: u64,
) -> LateBind {
    let mut pod = SimPod::new(name).unwrap();
    let proxy = pod.container("proxy").unwrap();
    let app = pod.container("app").unwrap();
    write_pod_list(
        pods_file,
        &[manifest(&pod, &app, &proxy, app_dir, proxy_dir)],
    );
    let served = format!("{proxy_dir}/app.sock");
    let delay = delay_ms.to_string();
    spawn(&mut pod, &proxy, &["listen", &served, "--delay-ms", &delay]);
    let dialed = format!("{app_dir}/app.sock");
    let refused = client(&mut pod, &app, &["connect", &dialed, "--interval-ms", "50"]);
    let incident = agent.one_resolved_holding(&pod.uid, refused, SETTLE);
    LateBind {
        pod,
        app,
        proxy,
        refused,
        incident,
    }
}

/// Waits (up to 5 s) until the sidecar has bound `path`.
fn wait_for_file(path: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !std::path::Path::new(path).exists() {
        assert!(std::time::Instant::now() < deadline, "{path} never bound");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether this kernel lends a task's registers to programs (`bpf_task_pt_regs`:
/// 5.15+, with BTF).
fn lends_registers() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut v = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let (major, minor) = (v.next().unwrap_or(0), v.next().unwrap_or(0));
    (major, minor) >= (5, 15) && std::path::Path::new("/sys/kernel/btf/vmlinux").exists()
}

fn window(i: &Value) -> f64 {
    i["race_window_seconds"]
        .as_f64()
        .unwrap_or_else(|| panic!("no window: {i:#}"))
}

/// The app and the sidecar share one emptyDir, mounted at `…/app-view` in the app and
/// `…/vol` in the sidecar (here a link: the kernel sees two different paths); the
/// sidecar binds 1.5 s late. One startup incident on the volume's socket.
#[test]
fn a_socket_bound_late_on_a_shared_volume_is_one_startup_race_naming_both_containers() {
    if !is_root_or_skip(
        "a_socket_bound_late_on_a_shared_volume_is_one_startup_race_naming_both_containers",
    ) {
        return;
    }
    let (dir, vol_s, view_s) = volume_with_view("startup");
    let (agent, pods_file) = agent_with("startup");
    let (vol_s, view_s) = (vol_s.as_str(), view_s.as_str());
    let LateBind {
        pod: _pod,
        app: a,
        proxy: p,
        refused,
        incident: i,
    } = late_bind(&agent, &pods_file, "uds-startup", view_s, vol_s, 1500);
    let served = format!("{vol_s}/app.sock");
    let dialed = format!("{view_s}/app.sock");
    assert!(
        refused >= 20,
        "the app was refused while the sidecar was late: {refused}"
    );
    // Where the kernel lends the task's registers (5.15+ with BTF) the connect path is
    // its exit alone: the verifier once refused that program and every kernel fell back
    // to entry and exit, twice the runs per connect, and no test noticed.
    if lends_registers() {
        let fallback = agent.stderr();
        let fallback: Vec<_> = fallback
            .iter()
            .filter(|l| l.contains("not by exit alone"))
            .collect();
        assert!(fallback.is_empty(), "{fallback:?}");
    }
    assert_eq!(
        (i["phase"].as_str(), i["state"].as_str(), i["kind"].as_str()),
        (Some("startup"), Some("resolved"), Some("sidecar_race")),
        "{i:#}"
    );
    assert_eq!(i["refused_count"].as_u64(), Some(refused), "{i:#}");
    assert_eq!(
        i["socket"],
        json!({"path": dialed, "volume": "sock", "abstract": false})
    );
    assert_eq!(
        (i["port"].clone(), i["destination"].clone()),
        (Value::Null, Value::Null)
    );
    assert_eq!(i["container"], "app");
    assert_eq!(i["container_id"], a.id.as_str());
    assert_eq!(i["sidecar"], "proxy");
    assert_eq!(i["sidecar_container_id"], p.id.as_str());
    assert!(
        (1.0..2.2).contains(&window(&i)),
        "first refusal → bind: {}",
        window(&i)
    );
    let advice = i["advice"].as_str().unwrap();
    assert!(
        advice.contains(&format!(r#"command: ["nc", "-zU", "{served}"]"#)),
        "{advice}"
    );
    let metrics = agent.metrics();
    assert!(
        metrics.contains(&format!(
            r#"container="app",sidecar="proxy",socket="sock/app.sock",phase="startup",protocol="unix"}} {refused}"#
        )),
        "{metrics}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A kernel without BTF (hidden from the agent): no `fexit`, and the syscall
/// tracepoints (asked for) pair each call's entry with its exit. The start line says
/// so in one degraded sentence, and a late bind on a shared volume is still one
/// startup race, exact.
#[test]
fn without_btf_the_syscall_fallback_still_sees_a_late_bind_exactly() {
    if !is_root_or_skip("without_btf_the_syscall_fallback_still_sees_a_late_bind_exactly") {
        return;
    }
    let dir = volume_dir("nobtf");
    let (agent, pods_file) = agent_started_by("nobtf", RunAgent::start_without_btf);
    let start = agent.wait_log(&["watching the kernel"], Duration::from_secs(5));
    assert!(start.contains(r#""unix_hooks":"syscalls""#), "{start}");
    let degraded = agent.wait_log(
        &[
            "degraded: Unix sockets are seen through",
            "/sys/kernel/btf/vmlinux",
        ],
        Duration::from_secs(5),
    );
    assert_eq!(
        agent
            .stderr()
            .iter()
            .filter(|l| l.contains("degraded: Unix sockets"))
            .count(),
        1,
        "one sentence: {degraded}"
    );
    let vol = dir.join("vol");
    let vol_s = vol.to_str().unwrap();
    let LateBind {
        pod: _pod,
        refused,
        incident: i,
        ..
    } = late_bind(&agent, &pods_file, "uds-nobtf", vol_s, vol_s, 1000);
    assert!(
        refused >= 10,
        "refused while the sidecar was late: {refused}"
    );
    assert_eq!(
        (
            i["phase"].as_str(),
            i["refused_count"].as_u64(),
            i["sidecar"].as_str()
        ),
        (Some("startup"), Some(refused), Some("proxy")),
        "{i:#}"
    );
    assert_eq!(i["socket"]["volume"], "sock");
    let _ = std::fs::remove_file(pods_file);
    let _ = std::fs::remove_dir_all(dir);
}

/// `auto` on a kernel that refuses `fexit` and has no kprobes (this host's): no Unix
/// hook at all rather than the syscall tracepoints (they slow every syscall on the
/// node), and one `degraded:` sentence naming `--unix-hooks=syscalls` and its cost.
#[test]
fn auto_without_fexit_or_kprobes_attaches_no_unix_hook_and_names_the_opt_in() {
    let name = "auto_without_fexit_or_kprobes_attaches_no_unix_hook_and_names_the_opt_in";
    if !is_root_or_skip(name) {
        return;
    }
    if std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists() {
        sidecar_race_tests::root::skip(name, "this kernel has kprobes (the kernel tier covers it)");
        return;
    }
    let agent = RunAgent::start(&["--pods-from", "none"]);
    let start = agent.wait_log(&["watching the kernel"], Duration::from_secs(5));
    assert!(start.contains(r#""unix_hooks":"missing""#), "{start}");
    let sentence = agent.wait_log(
        &["degraded: Unix domain socket races are not detected"],
        Duration::from_secs(5),
    );
    for part in [
        "nor kprobes (this kernel has no kprobes",
        "--unix-hooks=syscalls is not taken unasked",
        "212 → 288 ns per getppid",
    ] {
        assert!(sentence.contains(part), "{part}: {sentence}");
    }
    let lines = agent.stderr();
    let unix: Vec<_> = lines
        .iter()
        .filter(|l| l.contains("degraded: Unix"))
        .collect();
    assert_eq!(unix.len(), 1, "one sentence: {unix:?}");
}
/// The sidecar crashed (killed: its socket file stays), the app is refused with
/// ECONNREFUSED until the sidecar comes back and replaces the file: steady.
#[test]
fn a_stale_socket_file_after_a_sidecar_crash_is_a_steady_incident() {
    if !is_root_or_skip("a_stale_socket_file_after_a_sidecar_crash_is_a_steady_incident") {
        return;
    }
    let dir = volume_dir("stale");
    let (agent, pods_file) = agent_with("stale");
    let mut pod = SimPod::new("uds-stale").unwrap();
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    let vol = dir.join("vol");
    let vol_s = vol.to_str().unwrap();
    write_pod_list(&pods_file, &[manifest(&pod, &a, &p, vol_s, vol_s)]);
    let path = format!("{vol_s}/app.sock");
    let first = spawn(&mut pod, &p, &["listen", &path]);
    wait_for_file(&path);
    assert_eq!(
        client(&mut pod, &a, &["connect", &path, "--interval-ms", "50"]),
        0
    );
    // SIGKILL: no chance to remove the file.
    // SAFETY: plain kill(2) of our own child.
    unsafe { libc::kill(first as i32, libc::SIGKILL) };
    pod.wait(first).unwrap();
    assert!(std::path::Path::new(&path).exists(), "the stale file stays");
    let refused = client(
        &mut pod,
        &a,
        &["connect", &path, "--interval-ms", "50", "--attempts", "12"],
    );
    assert_eq!(refused, 12);
    spawn(&mut pod, &p, &["listen", &path, "--replace"]);
    let i = agent.one_resolved_holding(&pod.uid, refused, SETTLE);
    assert_eq!(
        (
            i["phase"].as_str(),
            i["state"].as_str(),
            i["refused_count"].as_u64()
        ),
        (Some("steady"), Some("resolved"), Some(12)),
        "{i:#}"
    );
    assert_eq!(i["socket"]["volume"], "sock");
    assert_eq!(i["sidecar"], "proxy");
    let _ = std::fs::remove_dir_all(dir);
}

/// The sidecar removes its socket at SIGTERM while the app keeps working: the app's
/// connects fail with ENOENT until the pod is torn down. A drain.
#[test]
fn a_socket_unlinked_at_sigterm_while_the_app_dials_is_a_drain() {
    if !is_root_or_skip("a_socket_unlinked_at_sigterm_while_the_app_dials_is_a_drain") {
        return;
    }
    let dir = volume_dir("drain");
    let agent = RunAgent::start(&["--pods-from", "none", UNIX_HOOKS[0], UNIX_HOOKS[1]]);
    let mut pod = SimPod::new("uds-drain").unwrap();
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    let path = format!("{}/app.sock", dir.join("vol").display());
    let sidecar = spawn(
        &mut pod,
        &p,
        &["listen", &path, "--unlink-on-term", "--linger-ms", "3000"],
    );
    std::thread::sleep(Duration::from_millis(300));
    let app = CountedApp::start(
        &mut pod,
        &a,
        &sr_uds(),
        &[
            "connect",
            &path,
            "--interval-ms",
            "100",
            "--attempts",
            "25",
            "--keep-dialing",
        ],
    );
    std::thread::sleep(Duration::from_millis(1000));
    pod.terminate(sidecar);
    let refused = app.refused(&mut pod);
    assert!(
        (10..=16).contains(&refused),
        "refused after the unlink: {refused}"
    );
    let uid = pod.uid.clone();
    drop(pod);
    let i = agent.one_resolved_holding(&uid, refused, SETTLE);
    assert_eq!(
        (
            i["phase"].as_str(),
            i["state"].as_str(),
            i["refused_count"].as_u64()
        ),
        (Some("drain"), Some("resolved"), Some(refused)),
        "{i:#}"
    );
    assert_eq!(
        i["socket"],
        json!({"path": path, "volume": null, "abstract": false})
    );
    assert!(i["listener_closed_at"].is_string(), "{i:#}");
    let _ = std::fs::remove_dir_all(dir);
}

/// An abstract name (no file: ECONNREFUSED until bound), served 1 s late.
#[test]
fn an_abstract_socket_bound_late_is_a_startup_race() {
    if !is_root_or_skip("an_abstract_socket_bound_late_is_a_startup_race") {
        return;
    }
    let (agent, pods_file) = agent_with("abstract");
    let mut pod = SimPod::new("uds-abstract").unwrap();
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    write_pod_list(&pods_file, &[manifest(&pod, &a, &p, "/unused", "/unused")]);
    let name = format!("@sr-uds-{}-abstract", std::process::id());
    spawn(&mut pod, &p, &["listen", &name, "--delay-ms", "1000"]);
    let refused = client(&mut pod, &a, &["connect", &name, "--interval-ms", "50"]);
    assert!(refused >= 10, "{refused}");
    let i = agent.one_resolved_holding(&pod.uid, refused, SETTLE);
    assert_eq!(
        (
            i["phase"].as_str(),
            i["state"].as_str(),
            i["refused_count"].as_u64()
        ),
        (Some("startup"), Some("resolved"), Some(refused)),
        "{i:#}"
    );
    assert_eq!(
        i["socket"],
        json!({"path": name, "volume": null, "abstract": true})
    );
    assert_eq!(i["sidecar"], "proxy");
}

/// A statsd-style client sends datagrams to a socket nothing ever binds.
#[test]
fn a_datagram_sender_to_an_absent_socket_is_counted_in_an_open_incident() {
    if !is_root_or_skip("a_datagram_sender_to_an_absent_socket_is_counted_in_an_open_incident") {
        return;
    }
    let dir = volume_dir("dgram");
    let (agent, pods_file) = agent_with("dgram");
    let mut pod = SimPod::new("uds-dgram").unwrap();
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    let vol_s = dir.join("vol").to_str().unwrap().to_string();
    write_pod_list(&pods_file, &[manifest(&pod, &a, &p, &vol_s, &vol_s)]);
    let path = format!("{vol_s}/statsd.sock");
    let refused = client(
        &mut pod,
        &a,
        &["sendto", &path, "--interval-ms", "20", "--attempts", "7"],
    );
    assert_eq!(refused, 7);
    let found = agent.wait_incidents(&pod.uid, SETTLE, |i| {
        i.iter().any(|i| i["refused_count"].as_u64() == Some(7))
    });
    assert_eq!(found.len(), 1, "{found:#?}");
    let i = &found[0];
    assert_eq!(
        (i["phase"].as_str(), i["state"].as_str()),
        (Some("startup"), Some("open")),
        "{i:#}"
    );
    assert_eq!(
        i["socket"],
        json!({"path": path, "volume": "sock", "abstract": false})
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// #50: the app mounts the volume with `subPathExpr: $(POD_NAME)` (its pod's own
/// directory of it, POD_NAME from the downward API), the sidecar mounts the whole
/// volume and binds 1.5 s late in that directory. One startup race on the volume's
/// `<pod>/app.sock`, naming the sidecar; before #50 the expression was ignored, the app's
/// socket taken at the volume's root, and the race never resolved.
#[test]
fn a_socket_under_a_sub_path_expr_is_one_startup_race_in_the_expanded_directory() {
    if !is_root_or_skip(
        "a_socket_under_a_sub_path_expr_is_one_startup_race_in_the_expanded_directory",
    ) {
        return;
    }
    let dir = volume_dir("subpathexpr");
    let (agent, pods_file) = agent_with("subpathexpr");
    let mut pod = SimPod::new("uds-subpathexpr").unwrap();
    let proxy = pod.container("proxy").unwrap();
    let app = pod.container("app").unwrap();
    let (vol, view) = (dir.join("vol"), dir.join("app-view"));
    let (vol_s, view_s) = (vol.display().to_string(), view.display().to_string());
    let mut m = manifest(&pod, &app, &proxy, &view_s, &vol_s);
    let pod_name = m["metadata"]["name"].as_str().expect("a name").to_string();
    // The app's view of the volume is its pod's directory there, as the kubelet mounts it.
    std::fs::create_dir_all(vol.join(&pod_name)).expect("the pod's directory");
    std::os::unix::fs::symlink(vol.join(&pod_name), &view).expect("the app's view");
    for c in m["spec"]["containers"].as_array_mut().expect("containers") {
        if c["name"] == "app" {
            c["volumeMounts"][0]["subPathExpr"] = json!("$(POD_NAME)");
            c["env"] = json!([{"name": "POD_NAME",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]);
        }
    }
    write_pod_list(&pods_file, &[m]);
    let served = format!("{vol_s}/{pod_name}/app.sock");
    spawn(&mut pod, &proxy, &["listen", &served, "--delay-ms", "1500"]);
    let dialed = format!("{view_s}/app.sock");
    let refused = client(&mut pod, &app, &["connect", &dialed, "--interval-ms", "50"]);
    assert!(
        refused >= 20,
        "the app was refused while the sidecar was late: {refused}"
    );
    let i = agent.one_resolved_holding(&pod.uid, refused, SETTLE);
    assert_eq!(
        (
            i["phase"].as_str(),
            i["sidecar"].as_str(),
            i["refused_count"].as_u64()
        ),
        (Some("startup"), Some("proxy"), Some(refused)),
        "{i:#}"
    );
    assert_eq!(
        i["socket"],
        json!({"path": dialed, "volume": "sock", "abstract": false})
    );
    let advice = i["advice"].as_str().unwrap();
    assert!(
        advice.contains(&format!(r#"command: ["nc", "-zU", "{served}"]"#)),
        "the probe names the sidecar's own path: {advice}"
    );
    let metrics = agent.metrics();
    assert!(
        metrics.contains(&format!(
            r#"socket="sock/{pod_name}/app.sock",phase="startup",protocol="unix"}} {refused}"#
        )),
        "{metrics}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A volume directory for `name` with a second view of it (a link: the kernel sees two
/// paths, as two containers mounting one emptyDir at different paths do): the
/// directory, the volume as the sidecar mounts it and as the app does.
fn volume_with_view(name: &str) -> (PathBuf, String, String) {
    let dir = volume_dir(name);
    let (vol, view) = (dir.join("vol"), dir.join("app-view"));
    std::os::unix::fs::symlink(&vol, &view).expect("the app's view of the volume");
    let (vol, view) = (vol.display().to_string(), view.display().to_string());
    (dir, vol, view)
}

/// Runs `program args` in container `c` to its end (its exit status is not ours).
fn run_in(pod: &mut SimPod, c: &SimContainer, program: &str, args: &[&str]) {
    let mut cmd = std::process::Command::new(program);
    cmd.args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let pid = pod.spawn(c, cmd).expect(program);
    pod.wait(pid).expect(program);
}

/// #32: glibc's own Unix probes beside a real race. `getent` tries the nscd socket
/// before DNS, `logger` connects to `/dev/log`, and neither exists here: refusals on
/// the app's own files, counted as `other`, never an incident. The race is one.
#[test]
fn glibc_lookups_and_syslog_beside_a_late_bind_leave_one_incident() {
    if !is_root_or_skip("glibc_lookups_and_syslog_beside_a_late_bind_leave_one_incident") {
        return;
    }
    assert!(
        !std::path::Path::new("/var/run/nscd/socket").exists()
            && !std::path::Path::new("/dev/log").exists(),
        "this test needs a host without nscd and /dev/log"
    );
    let dir = volume_dir("glibc");
    let (agent, pods_file) = agent_with("glibc");
    let mut pod = SimPod::new("uds-glibc").unwrap();
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    let vol_s = dir.join("vol").to_str().unwrap().to_string();
    write_pod_list(&pods_file, &[manifest(&pod, &a, &p, &vol_s, &vol_s)]);
    let path = format!("{vol_s}/app.sock");
    spawn(&mut pod, &p, &["listen", &path, "--delay-ms", "1500"]);
    for _ in 0..3 {
        run_in(&mut pod, &a, "getent", &["hosts", "sr-test.invalid"]);
        run_in(&mut pod, &a, "logger", &["sidecar-race test"]);
    }
    let refused = client(&mut pod, &a, &["connect", &path, "--interval-ms", "50"]);
    let i = agent.one_resolved_holding(&pod.uid, refused, SETTLE);
    assert_eq!(
        (
            i["phase"].as_str(),
            i["refused_count"].as_u64(),
            i["sidecar"].as_str()
        ),
        (Some("startup"), Some(refused), Some("proxy")),
        "{i:#}"
    );
    let other = agent.counter("refusals_other");
    assert!(other >= 6, "nscd and /dev/log refusals counted: {other}");
    let _ = std::fs::remove_dir_all(dir);
}

/// #32: the kubelet starts containers before their ids and mounts reach the agent. The
/// pod source lists the pod only after the app's first refusals; the app and the
/// sidecar see the volume at different paths. One startup incident, the app's count.
#[test]
fn refusals_before_the_pod_metadata_and_after_it_are_one_incident() {
    if !is_root_or_skip("refusals_before_the_pod_metadata_and_after_it_are_one_incident") {
        return;
    }
    let (dir, vol_s, view_s) = volume_with_view("late-meta");
    let (vol_s, view_s) = (vol_s.as_str(), view_s.as_str());
    let (agent, pods_file) = agent_with("late-meta");
    let mut pod = SimPod::new("uds-late-meta").unwrap();
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    spawn(
        &mut pod,
        &p,
        &["listen", &format!("{vol_s}/app.sock"), "--delay-ms", "2000"],
    );
    let dialed = format!("{view_s}/app.sock");
    let app = CountedApp::start(
        &mut pod,
        &a,
        &sr_uds(),
        &["connect", &dialed, "--interval-ms", "50"],
    );
    std::thread::sleep(Duration::from_millis(700));
    write_pod_list(&pods_file, &[manifest(&pod, &a, &p, view_s, vol_s)]);
    let refused = app.refused(&mut pod);
    assert!(
        refused >= 25,
        "refused while the sidecar was late: {refused}"
    );
    let i = agent.one_resolved_holding(&pod.uid, refused, SETTLE);
    assert_eq!(
        (
            i["phase"].as_str(),
            i["state"].as_str(),
            i["refused_count"].as_u64()
        ),
        (Some("startup"), Some("resolved"), Some(refused)),
        "{i:#}"
    );
    assert_eq!(
        i["socket"],
        json!({"path": dialed, "volume": "sock", "abstract": false})
    );
    assert_eq!(i["sidecar"], "proxy");
    let _ = std::fs::remove_dir_all(dir);
}

/// #32: the sidecar bound its socket before the pod source listed the pod (the usual
/// order); at deletion it unlinks it and the app still dials. One drain, not a startup
/// race with no metadata.
#[test]
fn a_socket_bound_before_the_metadata_and_unlinked_at_deletion_is_a_drain() {
    if !is_root_or_skip("a_socket_bound_before_the_metadata_and_unlinked_at_deletion_is_a_drain") {
        return;
    }
    let (dir, vol_s, view_s) = volume_with_view("early-bind");
    let (vol_s, view_s) = (vol_s.as_str(), view_s.as_str());
    let (agent, pods_file) = agent_with("early-bind");
    let mut pod = SimPod::new("uds-early-bind").unwrap();
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    let served = format!("{vol_s}/app.sock");
    let sidecar = spawn(
        &mut pod,
        &p,
        &["listen", &served, "--unlink-on-term", "--linger-ms", "3000"],
    );
    wait_for_file(&served);
    std::thread::sleep(Duration::from_millis(300));
    let mut m = manifest(&pod, &a, &p, view_s, vol_s);
    write_pod_list(&pods_file, &[m.clone()]);
    std::thread::sleep(Duration::from_millis(500));
    let dialed = format!("{view_s}/app.sock");
    let app = CountedApp::start(
        &mut pod,
        &a,
        &sr_uds(),
        &[
            "connect",
            &dialed,
            "--interval-ms",
            "100",
            "--attempts",
            "25",
            "--keep-dialing",
        ],
    );
    std::thread::sleep(Duration::from_millis(800));
    mark_deleting(&mut m, 30);
    write_pod_list(&pods_file, &[m]);
    std::thread::sleep(Duration::from_millis(300));
    pod.terminate(sidecar);
    let refused = app.refused(&mut pod);
    assert!(refused >= 8, "refused after the unlink: {refused}");
    let uid = pod.uid.clone();
    drop(pod);
    let i = agent.one_resolved_holding(&uid, refused, SETTLE);
    assert_eq!(
        (
            i["phase"].as_str(),
            i["state"].as_str(),
            i["refused_count"].as_u64()
        ),
        (Some("drain"), Some("resolved"), Some(refused)),
        "{i:#}"
    );
    assert_eq!(i["socket"]["volume"], "sock", "{i:#}");
    assert_eq!(i["sidecar"], "proxy", "{i:#}");
    let _ = std::fs::remove_dir_all(dir);
}
