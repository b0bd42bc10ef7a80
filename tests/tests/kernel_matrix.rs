//! The kernel tier: the agent on the LTS kernels fleets run, booted in QEMU (TCG, no
//! root, no KVM): Debian's 5.10, 6.1 (Debian 12, close to Amazon Linux 2023 and COS)
//! and 6.12 cloud kernels, and the arm64 6.1 cloud kernel with the cross-built arm64
//! agent (`cargo xtask test arm64`). The host's own kernel is covered by the other tiers.
//!
//! One boot per kernel runs everything (tests/src/vm_init.sh): the three promised
//! start-up failures (only cgroup v1 mounted, tracefs not mountable, a required
//! tracepoint absent), `trace` on a kubelet-layout pod (exact events, owners, cgroup
//! ids, `seen` counts), and `run` with a startup and a drain race read back from
//! `/api/v1/incidents` inside the VM. A misread field layout (a port, an address, the
//! cgroup id) fails an exact comparison here. A second boot with
//! `lockdown=confidentiality` (amd64) runs `trace` and `run` on the BTF tracepoints'
//! direct reads, with exact counts.

use std::{
    path::PathBuf,
    sync::OnceLock,
    time::{Duration, Instant},
};

use serde_json::Value;
use sidecar_race_tests::vm::{self, Arch, GuestRun, Kernel, ScenarioEnv};

/// A VM that has not powered off by then is killed (the scenario's boot takes 3–5
/// minutes under TCG on a 2-core machine running two VMs, the lockdown boot ~20 s).
const VM_TIMEOUT: Duration = Duration::from_secs(600);

fn get(env: &ScenarioEnv, key: &str) -> String {
    env.iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
        .unwrap()
}

/// The pods' UIDs and container IDs, the same for every kernel of this test binary.
fn env() -> &'static ScenarioEnv {
    static S: OnceLock<ScenarioEnv> = OnceLock::new();
    S.get_or_init(|| {
        let pid = std::process::id();
        let hex = |tag: u32| {
            format!(
                "{:016x}",
                0x5eed_0000_0000_0000u64 | ((pid as u64) << 8) | tag as u64
            )
            .repeat(4)
        };
        let uid = |tag: u32| {
            format!(
                "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
                pid,
                tag,
                tag,
                tag,
                0xabcdef000000u64 + tag as u64
            )
        };
        let env: ScenarioEnv = vec![
            ("POD1_UID".into(), uid(1)),
            ("POD1_PROXY".into(), hex(11)),
            ("POD1_APP".into(), hex(12)),
            ("POD2_UID".into(), uid(2)),
            ("POD2_PROXY".into(), hex(21)),
            ("POD2_APP".into(), hex(22)),
            ("POD3_UID".into(), uid(3)),
            ("POD3_PROXY".into(), hex(31)),
            ("POD3_APP".into(), hex(32)),
            ("POD4_UID".into(), uid(4)),
            ("POD4_PROXY".into(), hex(41)),
            ("POD4_APP".into(), hex(42)),
            ("POD5_UID".into(), uid(5)),
            ("POD5_PROXY".into(), hex(51)),
            ("POD5_APP".into(), hex(52)),
            ("CAPS".into(), daemonset_caps().join(",")),
        ];
        env
    })
}

/// The DaemonSet's added capabilities as setpriv names them (`+bpf`, `+perfmon`).
fn daemonset_caps() -> Vec<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/base/daemonset.yaml");
    let ds: Value = serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap())
        .expect("daemonset.yaml parses");
    let c = &ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"];
    assert_eq!(c["drop"][0], "ALL");
    c["add"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| format!("+{}", a.as_str().unwrap().to_lowercase()))
        .collect()
}

fn cap_bit(name: &str) -> u32 {
    match name {
        "+perfmon" => 38,
        "+bpf" => 39,
        "+sys_resource" => 24,
        "+sys_admin" => 21,
        other => panic!("capability {other} is not known to this test: add it"),
    }
}

fn boot(kernel: &Kernel) -> GuestRun {
    boot_with(kernel, "")
}

/// [`boot`] with `extra` on the kernel's command line.
fn boot_with(kernel: &Kernel, extra: &str) -> GuestRun {
    let initramfs: PathBuf = std::env::temp_dir().join(format!(
        "sr-kernel-tier-{}-{}-{}{}.cpio",
        std::process::id(),
        kernel.arch.name(),
        kernel.label,
        if extra.is_empty() { "" } else { "-extra" }
    ));
    let t = Instant::now();
    vm::build_initramfs(&initramfs, env(), kernel).expect("build the initramfs");
    eprintln!(
        "{}: initramfs ({} MiB) built in {:.1} s",
        kernel.label,
        std::fs::metadata(&initramfs).unwrap().len() >> 20,
        t.elapsed().as_secs_f64()
    );
    let run = vm::boot_with(kernel, &initramfs, VM_TIMEOUT, extra);
    let _ = std::fs::remove_file(&initramfs);
    let run = run.expect("boot the VM");
    // The whole console, for reading a failure (best effort: the directory may be
    // read-only for this user).
    let log = kernel.vmlinuz.with_file_name(if extra.is_empty() {
        "console.log"
    } else {
        "console-extra.log"
    });
    if std::fs::write(&log, run.console_text()).is_ok() {
        eprintln!("{}: console in {}", kernel.label, log.display());
    }
    eprintln!(
        "{} ({}): VM run took {:.1} s",
        kernel.label,
        kernel.package,
        run.elapsed.as_secs_f64()
    );
    assert!(
        !run.timed_out,
        "the {} VM did not finish within {VM_TIMEOUT:?}; console:\n{}",
        kernel.label,
        run.console_text()
    );
    assert!(
        !run.values("done").is_empty(),
        "the guest scenario did not finish; console:\n{}",
        run.console_text()
    );
    run
}

/// The agent's error message (its JSON log line at level ERROR) for a failure case.
fn failure(run: &GuestRun, key: &str) -> String {
    assert_eq!(
        run.one(&format!("{key}_rc")),
        "1",
        "the agent must refuse to start ({key}); console:\n{}",
        run.console_text()
    );
    let errors: Vec<String> = run
        .json(&format!("{key}_err"))
        .iter()
        .filter(|l| l["level"] == "ERROR")
        .filter_map(|l| l["message"].as_str().map(str::to_string))
        .collect();
    assert_eq!(
        errors.len(),
        1,
        "one error line ({key}): {:?}",
        run.values(&format!("{key}_err"))
    );
    errors.into_iter().next().unwrap()
}

fn assert_failures(run: &GuestRun) {
    // Only cgroup v1 mounted.
    assert_eq!(run.one("v1_cgroup2_mounts"), "0");
    assert!(
        !run.values("v1_mounted").is_empty(),
        "no v1 hierarchy mounted"
    );
    let e = failure(run, "v1");
    assert_eq!(
        e,
        "this node cannot run the agent:\n  - no cgroup2 filesystem is mounted (checked /proc/self/mountinfo); \
         the agent needs cgroup v2 or a hybrid host (cgroup2 at /sys/fs/cgroup/unified)"
    );
    // tracefs not mountable.
    let e = failure(run, "tracefs");
    assert!(
        e.starts_with(
            "this node cannot run the agent:\n  - tracefs is not mounted and mounting it at /sys/kernel/tracing failed ("
        ) && e.ends_with(
            "); mount it on the host (`mount -t tracefs nodev /sys/kernel/tracing`) or into the \
             agent's container; without tracefs the tracepoints can only be hooked as BTF \
             tracepoints, and this kernel has no BTF (/sys/kernel/btf/vmlinux)"
        ) && e.lines().count() == 2,
        "{e}"
    );
    // No tracefs, BTF kept: the BTF tracepoints see a refused connect.
    assert_eq!(
        run.values("notracefs_ready"),
        ["yes"],
        "the agent without tracefs"
    );
    assert_eq!(
        run.values("notracefs_tracefs"),
        [r#""tracefs":"none (BTF tracepoints)""#]
    );
    assert_eq!(
        run.values("notracefs_refused"),
        ["1"],
        "one refused connect without tracefs"
    );
    // A required tracepoint absent.
    let e = failure(run, "tracepoint");
    assert_eq!(
        e,
        "this node cannot run the agent:\n  - tracepoint tcp:tcp_receive_reset is unusable (this kernel does not \
         have it): refused-connection events cannot work"
    );
}

/// `cgid <path> <inode>` lines: the cgroup v2 id of each directory, as the guest saw it.
/// The cgroup path of container `ctr` (`APP`, `PROXY`) of pod `pod` (`POD1`…) in the
/// scenario, laid out as the kubelet lays it out with the systemd driver.
fn container_path(pod: &str, ctr: &str) -> String {
    format!(
        "{}/cri-containerd-{}.scope",
        pod_path(pod),
        get(env(), &format!("{pod}_{ctr}"))
    )
}

/// The cgroup path of the guest's Burstable pod `pod` (`POD1`), as the systemd driver
/// lays it out (the guest script's `pod_dir`).
fn pod_path(pod: &str) -> String {
    format!(
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
        get(env(), &format!("{pod}_UID")).replace('-', "_")
    )
}

fn cgroup_id(run: &GuestRun, path: &str) -> u64 {
    run.values("cgid")
        .iter()
        .find_map(|v| {
            let (p, id) = v.rsplit_once(' ')?;
            (p == path).then(|| id.parse().unwrap())
        })
        .unwrap_or_else(|| panic!("no cgroup id for {path}: {:?}", run.values("cgid")))
}

fn pid(run: &GuestRun, name: &str) -> u64 {
    run.values("pid")
        .iter()
        .find_map(|v| {
            let (n, p) = v.split_once(' ')?;
            (n == name).then(|| p.parse().unwrap())
        })
        .unwrap_or_else(|| panic!("no pid for {name}"))
}

/// What a kernel of the tier can do, which the checks expect.
#[derive(Clone, Copy)]
struct Traits {
    /// `tcp:tcp_send_reset` reports resets sent without a socket (6.10 on).
    socketless_send_reset: bool,
    /// BPF trampolines on kernel functions (`fexit`): x86_64 kernels have them since
    /// 5.5, arm64 ones since 6.5 (before, attaching fails with ENOTSUPP, 524).
    fexit: bool,
    /// `skb:kfree_skb` records the drop reason (5.17 on), so UDP refusals are seen.
    drop_reason: bool,
    /// `icmp:icmp_send` (Debian's 6.1.192 and 6.12 have it, 5.10 not): `auto` sees IPv4's UDP refusals there and leaves
    /// `kfree_skb` off, with one line saying what IPv6's then need.
    icmp_send: bool,
}

/// The line a kernel without BPF trampolines but with kprobes makes the agent log (an
/// info line: kprobes see what fexit sees).
const NO_FEXIT: &str = "Unix sockets are seen through kprobes, not fexit (attach unix_stream_connect: \
     `bpf_raw_tracepoint_open` failed: Unknown error 524 (os error 524)): a return the kernel's \
     kretprobe instances could not take is counted in \
     sidecar_race_kernel_table_entries_gone_total{table=\"unix_kprobe_calls\"}";

fn assert_trace(run: &GuestRun, label: &str, traits: Traits) {
    let env = env();
    assert_eq!(run.one("trace_rc"), "0", "{}", run.console_text());
    assert_eq!(run.one("ipv6"), "yes");
    let err = run.json("trace_err");
    let messages: Vec<&str> = err.iter().filter_map(|l| l["message"].as_str()).collect();
    let ready = err
        .iter()
        .find(|l| l["message"] == "watching the kernel")
        .unwrap_or_else(|| panic!("trace never watched the kernel: {messages:?}"));
    let attached = ready["attached"].as_str().unwrap_or_default();
    // Debian's kernels (5.10 on) ship BTF and take fexit (x86_64) or kprobes (arm64
    // before 6.5) on listen start and stop: the state-change tracepoint is not attached.
    assert_eq!(ready["set_state_hook"], "off", "{label}: {messages:?}");
    assert_eq!(
        ready["tcp_hooks"],
        if traits.fexit { "fentry" } else { "kprobes" },
        "{label}: {messages:?}"
    );
    let degraded: Vec<&&str> = messages
        .iter()
        .filter(|m| m.starts_with("degraded"))
        .collect();
    eprintln!("{label}: attached {attached}; degraded: {degraded:?}");
    let mut expected_degraded: Vec<&str> = Vec::new();
    let mut expected_attached = vec!["tcp_receive_reset"];
    if traits.socketless_send_reset {
        expected_attached.push("tcp_send_reset");
    } else {
        expected_degraded.push(
            "degraded: tracepoint tcp:tcp_send_reset is unusable (field `saddr` has 4 bytes, expected 28; \
               this kernel's tcp_send_reset does not report resets sent without a socket (needs 6.10+)): \
               local-redirect awareness (local_dst of refusals after a NAT REDIRECT) disabled",
        );
    }
    expected_attached.extend(["cgroup_mkdir", "cgroup_rmdir"]);
    let kfree_skb_left_off = format!(
        "degraded: tracepoint skb:kfree_skb not attached ({}): {} disabled",
        sidecar_race_agent::kernel::udp_hook::kfree_skb_left_off(
            sidecar_race_agent::kernel::udp_hook::UdpHookChoice::Auto
        ),
        KFREE_SKB_CAPABILITY
    );
    if traits.icmp_send {
        expected_attached.push("icmp_send");
        expected_degraded.push(&kfree_skb_left_off);
    } else if traits.drop_reason {
        expected_attached.push("kfree_skb");
    } else {
        expected_degraded.push(
            "degraded: tracepoint skb:kfree_skb is unusable (no field `reason`: the kernel records no \
               drop reason (5.17+)): UDP refusals over IPv6, and over IPv4 where icmp:icmp_send is \
               missing (datagrams to a pod's loopback port no socket holds; needs the drop reason \
               NO_SOCKET, 5.17+) disabled",
        );
    }
    assert_eq!(attached, format!("{expected_attached:?}"), "{label}");
    if !traits.fexit {
        assert!(messages.contains(&NO_FEXIT), "{label}: {messages:?}");
    }
    assert_eq!(
        degraded,
        expected_degraded.iter().collect::<Vec<_>>(),
        "{label}"
    );

    let pod_dir = pod_path("POD1");
    let app_path = container_path("POD1", "APP");
    let proxy_path = container_path("POD1", "PROXY");
    let app_id = cgroup_id(run, &app_path);
    let proxy_id = cgroup_id(run, &proxy_path);
    let events = run.json("trace_out");
    let of = |kind: &str| -> Vec<&Value> { events.iter().filter(|e| e["kind"] == kind).collect() };

    // Refusals: 3 IPv4, 1 IPv6, 1 REDIRECTed, each exactly once, with the owner read
    // from the socket (its cgroup) and the task the reset ran in (the connecting one).
    assert_eq!(run.one("redirect"), "ready", "{}", run.console_text());
    let refused = of("refused");
    let dsts: Vec<&str> = refused.iter().map(|e| e["dst"].as_str().unwrap()).collect();
    assert_eq!(
        dsts,
        [
            "127.0.0.1:15001",
            "127.0.0.1:15001",
            "127.0.0.1:15001",
            "[::1]:15002",
            "10.96.0.10:80"
        ],
        "{label}: {refused:#?}"
    );
    for (i, e) in refused.iter().enumerate() {
        let (family, src_prefix, pid_name) = match i {
            0..3 => ("ipv4", "127.0.0.1:", "app4"),
            3 => ("ipv6", "[::1]:", "app6"),
            _ => ("ipv4", "10.200.0.2:", "appr"),
        };
        assert_eq!(e["family"], family, "{e}");
        assert!(e["src"].as_str().unwrap().starts_with(src_prefix), "{e}");
        let sport: u16 = e["src"]
            .as_str()
            .unwrap()
            .rsplit(':')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(sport >= 1024, "an ephemeral source port: {e}");
        if i == 4 && traits.socketless_send_reset {
            // Where the local stack refused the redirected SYN.
            assert_eq!(e["local_dst"], "127.0.0.1:15001", "{label}: {e}");
        } else {
            // Before 6.10: the redirect is not visible (the degraded capability).
            assert!(e["local_dst"].is_null(), "{label}: {e}");
        }
        assert_eq!(e["cgroup_id"], app_id, "{label}: {e}");
        assert_eq!(e["cgroup_path"], app_path.as_str(), "{e}");
        assert_eq!(e["pod_uid"], get(env, "POD1_UID").as_str(), "{e}");
        assert_eq!(e["container_id"], get(env, "POD1_APP").as_str(), "{e}");
        assert_eq!(e["pid"], pid(run, pid_name), "{e}");
        assert_eq!(e["tgid"], pid(run, pid_name), "{e}");
        assert_eq!(e["comm"], "sr-app", "{e}");
        assert!(e["ts"].as_str().unwrap().ends_with('Z'), "{e}");
    }
    // The listener up and down, owned by the proxy.
    for kind in ["listen", "listen_closed"] {
        let l = of(kind);
        assert_eq!(l.len(), 1, "{label}: {kind}: {l:#?}");
        let e = l[0];
        assert_eq!(e["src"], "127.0.0.1:15003", "{e}");
        assert_eq!(e["cgroup_id"], proxy_id, "{e}");
        assert_eq!(e["container_id"], get(env, "POD1_PROXY").as_str(), "{e}");
        assert_eq!(e["comm"], "sr-proxy", "{e}");
        assert_eq!(e["tgid"], pid(run, "proxy"), "{e}");
    }
    // The pod's cgroups created, each with its id and path.
    let created = of("cgroup_created");
    let expect = [
        "/kubepods.slice".to_string(),
        "/kubepods.slice/kubepods-burstable.slice".to_string(),
        pod_dir.clone(),
        proxy_path.clone(),
        app_path.clone(),
    ];
    let mut got: Vec<(String, u64)> = created
        .iter()
        .map(|e| {
            (
                e["cgroup_path"].as_str().unwrap().to_string(),
                e["cgroup_id"].as_u64().unwrap(),
            )
        })
        .collect();
    got.sort();
    let mut want: Vec<(String, u64)> = expect
        .iter()
        .map(|p| (p.clone(), cgroup_id(run, p)))
        .collect();
    want.sort();
    assert_eq!(got, want, "{label}: cgroup_created");
    assert!(of("cgroup_removed").is_empty());

    // Exact kernel counts: nothing else in the VM makes these events.
    let summary = err
        .iter()
        .find_map(|l| l.get("summary"))
        .unwrap_or_else(|| panic!("no summary: {messages:?}"));
    let k = &summary["kernel_events"];
    for (kind, n) in [
        ("refused", 5),
        ("listen", 1),
        ("listen_closed", 1),
        ("cgroup_created", 5),
        ("cgroup_removed", 0),
    ] {
        assert_eq!(k[kind]["seen"], n, "{label}: {kind} seen: {summary}");
        assert_eq!(k[kind]["delivered"], n, "{label}: {kind}: {summary}");
        assert_eq!(k[kind]["lost"], 0, "{label}: {kind}: {summary}");
    }
    assert_eq!(summary["dropped_in_agent"], 0);
    assert_eq!(summary["decode_errors"], 0);
    assert_eq!(summary["unattributed_events"], 0, "{summary}");
}

fn window(i: &Value) -> f64 {
    i["race_window_seconds"].as_f64().unwrap()
}

fn assert_incidents(run: &GuestRun, label: &str, traits: Traits) {
    let env = env();
    assert_eq!(run.one("run_rc"), "0", "{}", run.console_text());
    let all: Vec<Value> = run
        .json("incidents")
        .into_iter()
        .flat_map(|v| v["incidents"].as_array().cloned().unwrap_or_default())
        .collect();
    let of_pod =
        |uid: &str| -> Vec<&Value> { all.iter().filter(|i| i["pod_uid"] == uid).collect() };

    let startup = of_pod(&get(env, "POD2_UID"));
    assert_eq!(startup.len(), 1, "{label}: one startup incident: {all:#?}");
    let i = startup[0];
    assert_eq!(i["kind"], "sidecar_race", "{i:#}");
    assert_eq!(i["phase"], "startup", "{i:#}");
    assert_eq!(i["state"], "resolved", "{i:#}");
    assert_eq!(i["port"], 15001, "{i:#}");
    assert_eq!(i["destination"], "127.0.0.1:15001", "{i:#}");
    assert!(i["local_destination"].is_null(), "{i:#}");
    assert_eq!(i["container_id"], get(env, "POD2_APP").as_str(), "{i:#}");
    assert_eq!(
        i["sidecar_container_id"],
        get(env, "POD2_PROXY").as_str(),
        "{i:#}"
    );
    assert!(i["refused_count"].as_u64().unwrap() >= 3, "{i:#}");
    // The proxy listens 1 s late; emulation stretches process start-up, not sleeps.
    let w = window(i);
    assert!(
        (0.7..2.5).contains(&w),
        "{label}: startup window {w}: {i:#}"
    );

    let drain = of_pod(&get(env, "POD3_UID"));
    assert_eq!(drain.len(), 1, "{label}: one drain incident: {all:#?}");
    let i = drain[0];
    assert_eq!(i["kind"], "sidecar_race", "{i:#}");
    assert_eq!(i["phase"], "drain", "{i:#}");
    assert_eq!(i["state"], "resolved", "{i:#}");
    assert_eq!(i["port"], 15001, "{i:#}");
    assert_eq!(i["container_id"], get(env, "POD3_APP").as_str(), "{i:#}");
    assert!(i["listener_closed_at"].is_string(), "{i:#}");
    assert!(i["refused_count"].as_u64().unwrap() >= 10, "{i:#}");
    let w = window(i);
    assert!((1.0..3.5).contains(&w), "{label}: drain window {w}: {i:#}");

    // REDIRECT: the app dials 10.96.0.10:80, NAT sends it to the proxy's 15001, which
    // listens 1 s late.
    let redirected: u64 = run
        .values("app")
        .iter()
        .find_map(|l| {
            l.strip_prefix("sr-app: connected to 10.96.0.10:80 after ")?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| {
            panic!(
                "{label}: the redirected app never connected: {:?}",
                run.values("app")
            )
        });
    assert!(redirected >= 3, "{label}: {redirected} redirected refusals");
    let stats = run
        .json("run_err")
        .into_iter()
        .rfind(|l| l["message"] == "kernel event counts")
        .unwrap_or_else(|| panic!("{label}: no kernel event counts from run"));
    let redirect = of_pod(&get(env, "POD4_UID"));
    if traits.socketless_send_reset {
        assert_eq!(
            redirect.len(),
            1,
            "{label}: one REDIRECT incident: {all:#?}"
        );
        let i = redirect[0];
        assert_eq!(i["kind"], "sidecar_race", "{i:#}");
        assert_eq!(i["phase"], "startup", "{i:#}");
        assert_eq!(i["state"], "resolved", "{i:#}");
        assert_eq!(i["port"], 15001, "{i:#}");
        assert_eq!(i["destination"], "10.96.0.10:80", "{i:#}");
        assert_eq!(i["local_destination"], "127.0.0.1:15001", "{i:#}");
        assert_eq!(i["container_id"], get(env, "POD4_APP").as_str(), "{i:#}");
        assert_eq!(
            i["sidecar_container_id"],
            get(env, "POD4_PROXY").as_str(),
            "{i:#}"
        );
        assert_eq!(i["refused_count"], redirected, "{i:#}");
        let w = window(i);
        assert!(
            (0.7..2.5).contains(&w),
            "{label}: REDIRECT window {w}: {i:#}"
        );
        assert_eq!(stats["refusals_other"], 0, "{label}: {stats}");
        assert_eq!(all.len(), 3, "{label}: no other incidents: {all:#?}");
    } else {
        // Before 6.10 the redirected refusals carry only the service address: they are
        // counted as not pod-local, and no incident names the sidecar.
        assert!(redirect.is_empty(), "{label}: {redirect:#?}");
        assert_eq!(stats["refusals_other"], redirected, "{label}: {stats}");
        assert_eq!(all.len(), 2, "{label}: no other incidents: {all:#?}");
    }
}

/// Whether an error message is the one expected.
type Expected<'a> = dyn Fn(&str) -> bool + 'a;

/// `trace` as uid 0 with only some capabilities (and no_new_privs), as the DaemonSet
/// runs it: `lp` with the manifest's, `lp_sa` with SYS_RESOURCE and SYS_ADMIN added, at
/// the kernel's own `perf_event_paranoid` (3 on Debian's kernels); then at 2, `lp2` with
/// the manifest's and `lp2_sr` with SYS_RESOURCE added. Before 5.11 the memlock limit
/// needs SYS_RESOURCE; at 3 (Debian's hardening patch) perf_event_open needs SYS_ADMIN,
/// and without it the tracepoints are hooked as BTF tracepoints.
fn assert_least_privilege(run: &GuestRun, label: &str, memcg_accounting: bool) {
    let env = env();
    let app_path = container_path("POD1", "APP");
    let app_id = cgroup_id(run, &app_path);
    let paranoid: i32 = run.one("perf_event_paranoid").parse().unwrap();
    let manifest = daemonset_caps();
    let with = |extra: &[&'static str]| -> Vec<String> {
        manifest
            .iter()
            .cloned()
            .chain(extra.iter().map(|e| e.to_string()))
            .collect()
    };
    let memlock = |e: &str| {
        e.starts_with("this node cannot run the agent:\n  - cannot raise RLIMIT_MEMLOCK (")
            && e.ends_with(
                "); kernels before 5.11 count BPF maps against it: give the agent \
                 CAP_SYS_RESOURCE or an unlimited memlock limit",
            )
            && e.lines().count() == 2
    };
    let cases: [(&str, Vec<String>, Option<&Expected<'_>>); 4] = [
        (
            "lp",
            with(&[]),
            (!memcg_accounting).then_some(&memlock as &dyn Fn(&str) -> bool),
        ),
        ("lp_sa", with(&["+sys_resource", "+sys_admin"]), None),
        (
            "lp2",
            with(&[]),
            (!memcg_accounting).then_some(&memlock as &dyn Fn(&str) -> bool),
        ),
        ("lp2_sr", with(&["+sys_resource"]), None),
    ];
    for (key, caps, fails) in cases {
        if let Some(expected) = fails {
            let e = failure(run, key);
            assert!(expected(&e), "{label}: {key} with only {caps:?}: {e}");
            eprintln!("{label}: {key} with only {caps:?} refused: {e}");
            continue;
        }
        assert_eq!(
            run.one(&format!("{key}_rc")),
            "0",
            "{label}: the agent with only {caps:?}: {:?}",
            run.values(&format!("{key}_err"))
        );
        let want: u64 = caps.iter().map(|c| 1u64 << cap_bit(c)).sum();
        let eff = u64::from_str_radix(&run.one(&format!("{key}_capeff")), 16).unwrap();
        assert_eq!(eff, want, "{label}: effective capabilities {caps:?}");
        assert_eq!(run.one(&format!("{key}_nnp")), "1");
        let refused = run.json(&format!("{key}_out"));
        assert_eq!(refused.len(), 1, "{label}: {key}: {refused:#?}");
        let e = &refused[0];
        assert_eq!(e["dst"], "127.0.0.1:15004", "{e}");
        assert_eq!(e["cgroup_id"], app_id, "{e}");
        assert_eq!(e["container_id"], get(env, "POD1_APP").as_str(), "{e}");
        // At 3 the kernel refuses perf_event_open without SYS_ADMIN: the tracepoints
        // are hooked as BTF tracepoints instead, which need no perf event.
        let err = run.values(&format!("{key}_err")).join("\n");
        let btf_instead = [
            "tcp:tcp_receive_reset",
            "cgroup:cgroup_mkdir",
            "cgroup:cgroup_rmdir",
        ]
        .iter()
        .all(|tp| {
            err.contains(&format!(
                "{tp} hooked as a BTF tracepoint, which needs no perf event"
            ))
        });
        let at = if key.starts_with("lp2") { 2 } else { paranoid };
        let restricted = at > 2 && !caps.iter().any(|c| c == "+sys_admin");
        assert_eq!(
            btf_instead, restricted,
            "{label}: {key} with only {caps:?}: {err}"
        );
    }
}

fn kernel_tier(arch: Arch, label: &str, traits: Traits) {
    let test = format!("kernel_{}_{}", label.replace('.', "_"), arch.name());
    let Some(kernel) = vm::kernel_or_skip(&test, arch, label) else {
        return;
    };
    let run = boot(&kernel);
    let release = run.one("kernel");
    assert!(
        release.starts_with(&format!("{label}.")),
        "booted {release}, expected {label}"
    );
    assert_failures(&run);
    assert_trace(&run, label, traits);
    assert_incidents(&run, label, traits);
    let version = sidecar_race_agent::kernel::requirements::parse_kernel_version(&release)
        .expect("a kernel version");
    assert_least_privilege(&run, label, version >= (5, 11));
    assert_unix(&run, label, traits);
    assert_tcp_hooks(&run, label, traits);
    assert_restart(&run, label, version);
    if arch == Arch::Amd64 {
        assert_lockdown(&boot_with(&kernel, "lockdown=confidentiality"), label);
    }
}

/// A startup race across a restart of a pinning agent (section 5b): from 5.15 the new
/// agent adopts the pins and tells the whole race; before, where tracepoints cannot be
/// pinned, the old agent says so in one `degraded:` line and the refusals lost in the
/// restart are measured (printed), not hidden.
fn assert_restart(run: &GuestRun, label: &str, version: (u32, u32)) {
    assert_eq!(
        run.one("restart_old_rc"),
        "0",
        "{label}: {}",
        run.console_text()
    );
    assert_eq!(
        run.one("restart_new_rc"),
        "0",
        "{label}: {}",
        run.console_text()
    );
    let refused: u64 = run
        .values("restart_app")
        .last()
        .and_then(|l| l.split(" after ").nth(1)?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{label}: no count from the app: {}", run.console_text()));
    let all: Vec<Value> = run
        .json("incidents_restart")
        .into_iter()
        .flat_map(|v| v["incidents"].as_array().cloned().unwrap_or_default())
        .collect();
    let uid = get(env(), "POD5_UID");
    let mine: Vec<&Value> = all
        .iter()
        .filter(|i| i["pod_uid"] == uid.as_str())
        .collect();
    assert_eq!(
        mine.len(),
        1,
        "{label}: one startup incident across the restart: {all:#?}"
    );
    let i = mine[0];
    assert_eq!(i["phase"], "startup", "{label}: {i:#}");
    let seen = i["refused_count"].as_u64().unwrap();
    let old = run.values("restart_old_err").join("\n");
    let new = run.values("restart_new_err").join("\n");
    if version >= (5, 15) {
        assert!(old.contains("programs and maps pinned"), "{label}: {old}");
        assert!(
            new.contains("adopted the programs and maps"),
            "{label}: {new}"
        );
        assert_eq!(
            seen, refused,
            "{label}: every refusal across the restart: {i:#}"
        );
    } else {
        assert!(
            old.contains("degraded: the programs and maps are not pinned")
                && old.contains("perf events"),
            "{label}: the old agent says why nothing is pinned: {old}"
        );
        eprintln!(
            "{label}: a restart without pins lost {} of {refused} refusals",
            refused - seen.min(refused)
        );
    }
}

/// Booted with `lockdown=confidentiality`: the agent starts on the BTF tracepoints'
/// direct reads and says what it cannot see in one `degraded:` sentence that names how
/// it knew (securityfs, or in a pod a probe program). A pod made while it watches gets
/// every refusal once with its container's id, the listener up and down; a startup
/// race is one incident with the app's exact count; /readyz says it is degraded.
fn assert_lockdown(run: &GuestRun, label: &str) {
    use sidecar_race_agent::kernel::lockdown::degraded_sentence;
    let env = env();
    assert_eq!(
        run.one("lockdown"),
        "none integrity [confidentiality]",
        "{label}: the guest's lockdown"
    );
    assert_eq!(
        run.one("lockdown_trace_ready"),
        "yes",
        "{}",
        run.console_text()
    );
    assert_eq!(run.one("lockdown_trace_rc"), "0", "{}", run.console_text());
    let degraded_lines = |key: &str| -> Vec<String> {
        run.json(key)
            .iter()
            .filter_map(|l| l["message"].as_str())
            .filter(|m| m.starts_with("degraded"))
            .map(str::to_string)
            .collect()
    };
    let securityfs = format!(
        "degraded: {}",
        degraded_sentence("/sys/kernel/security/lockdown")
    );
    assert_eq!(
        degraded_lines("lockdown_trace_err"),
        std::slice::from_ref(&securityfs),
        "{label}: one sentence"
    );
    let app_path = container_path("POD1", "APP");
    let app_id = cgroup_id(run, &app_path);
    let events = run.json("lockdown_trace_out");
    let of = |kind: &str| -> Vec<&Value> { events.iter().filter(|e| e["kind"] == kind).collect() };
    let refused = of("refused");
    let dsts: Vec<&str> = refused.iter().map(|e| e["dst"].as_str().unwrap()).collect();
    assert_eq!(
        dsts,
        [
            "127.0.0.1:15001",
            "127.0.0.1:15001",
            "127.0.0.1:15001",
            "[::1]:15002"
        ],
        "{label}: every refusal once under lockdown: {events:#?}"
    );
    for e in &refused {
        assert_eq!(e["cgroup_id"], app_id, "{label}: {e}");
        assert_eq!(
            e["container_id"],
            get(env, "POD1_APP").as_str(),
            "{label}: {e}"
        );
        assert_eq!(e["comm"], "sr-app", "{label}: {e}");
        let src = e["src"].as_str().unwrap();
        assert!(
            !src.ends_with(":0") && (src.starts_with("127.0.0.1:") || src.starts_with("[::1]:")),
            "{label}: the client's own end, read from the socket: {e}"
        );
    }
    for kind in ["listen", "listen_closed"] {
        let l = of(kind);
        assert_eq!(l.len(), 1, "{label}: {kind}: {events:#?}");
        assert_eq!(l[0]["src"], "127.0.0.1:15003", "{label}: {}", l[0]);
        assert_eq!(l[0]["comm"], "sr-proxy", "{label}: {}", l[0]);
        assert_eq!(
            l[0]["container_id"],
            get(env, "POD1_PROXY").as_str(),
            "{label}: {}",
            l[0]
        );
    }
    let made: Vec<(&str, u64)> = of("cgroup_created")
        .iter()
        .filter_map(|e| Some((e["cgroup_path"].as_str()?, e["cgroup_id"].as_u64()?)))
        .collect();
    assert!(
        made.contains(&(app_path.as_str(), app_id)),
        "{label}: the new cgroup named from cgroupfs: {made:?}"
    );
    let summary = run
        .json("lockdown_trace_err")
        .into_iter()
        .find_map(|l| l.get("summary").cloned())
        .unwrap_or_else(|| panic!("{label}: no summary: {}", run.console_text()));
    for (kind, n) in [
        ("refused", 4),
        ("listen", 1),
        ("listen_closed", 1),
        ("cgroup_created", 5),
    ] {
        let k = &summary["kernel_events"][kind];
        assert_eq!(
            (&k["seen"], &k["delivered"], &k["lost"]),
            (&n.into(), &n.into(), &0.into()),
            "{label}: {kind}: {summary}"
        );
    }

    assert_eq!(run.one("lockdown_run_rc"), "0", "{}", run.console_text());
    let readyz = run.values("lockdown_readyz").join("\n");
    assert_eq!(readyz, format!("ready\n{securityfs}"), "{label}");
    let told: u64 = run
        .one("lockdown_app")
        .split(" after ")
        .nth(1)
        .and_then(|r| r.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{label}: no count from the app: {}", run.console_text()));
    let all: Vec<Value> = run
        .json("lockdown_incidents")
        .into_iter()
        .flat_map(|v| v["incidents"].as_array().cloned().unwrap_or_default())
        .collect();
    let mine: Vec<&Value> = all
        .iter()
        .filter(|i| i["pod_uid"] == get(env, "POD2_UID").as_str())
        .collect();
    assert_eq!(mine.len(), 1, "{label}: one startup incident: {all:#?}");
    let i = mine[0];
    assert_eq!(i["phase"], "startup", "{label}: {i:#}");
    assert_eq!(i["container_id"], get(env, "POD2_APP").as_str(), "{i:#}");
    assert_eq!(
        i["sidecar_container_id"],
        get(env, "POD2_PROXY").as_str(),
        "{i:#}"
    );
    assert_eq!(
        i["refused_count"].as_u64(),
        Some(told),
        "{label}: the app's own count under lockdown: {i:#}"
    );
    eprintln!(
        "{label}: lockdown=confidentiality: {told} of {told} refusals, window {}",
        window(i)
    );

    assert_eq!(run.one("lockdown_probe_rc"), "0", "{}", run.console_text());
    assert_eq!(
        degraded_lines("lockdown_probe_err"),
        [format!(
            "degraded: {}",
            degraded_sentence("the kernel refuses bpf_probe_read_kernel to tracing programs")
        )],
        "{label}: told by the probe program"
    );
}

/// The "watching the kernel" line of `trace` run `key`, which exited 0, and every log
/// message it wrote.
fn watching(run: &GuestRun, label: &str, key: &str) -> (Value, Vec<String>) {
    assert_eq!(run.one(&format!("{key}_rc")), "0", "{}", run.console_text());
    let err = run.json(&format!("{key}_err"));
    let messages: Vec<String> = err
        .iter()
        .filter_map(|l| l["message"].as_str().map(str::to_string))
        .collect();
    let ready = err
        .iter()
        .find(|l| l["message"] == "watching the kernel")
        .cloned()
        .unwrap_or_else(|| panic!("{label} {key}: never watched the kernel: {messages:?}"));
    (ready, messages)
}

/// Connects of each kind in section 8.
const CONNECTS: u64 = 20;

/// The program runs of section 8, in its order: listen, [`CONNECTS`] connects closed
/// with a FIN, as many closed with a reset, one refused connect, the listener's close.
#[derive(Debug, PartialEq)]
struct Runs {
    listen: u64,
    fin: u64,
    rst: u64,
    refused: u64,
    close: u64,
}

fn runs(run: &GuestRun, key: &str) -> Runs {
    let v: Vec<u64> = run
        .one(&format!("{key}_runs"))
        .split(' ')
        .map(|n| n.parse().expect("a run count"))
        .collect();
    let [listen, fin, rst, refused, close] = v[..] else {
        panic!("{key}_runs: {v:?}");
    };
    Runs {
        listen,
        fin,
        rst,
        refused,
        close,
    }
}

/// TCP with each hook path (section 8): the listener up and down and the refusal seen
/// alike, and what the agent's programs run. With the listen hooks nothing runs on a
/// connect that succeeds and closes with a FIN; a reset runs the reset programs
/// (`tcp_receive_reset`, and from 6.10 `tcp_send_reset`), once each, whatever the
/// reset ends; the fallback runs on every state change. Counts are exact under TCG.
fn assert_tcp_hooks(run: &GuestRun, label: &str, traits: Traits) {
    let env = env();
    let app_id = cgroup_id(run, &container_path("POD1", "APP"));
    let proxy_id = cgroup_id(run, &container_path("POD1", "PROXY"));
    let auto = if traits.fexit { "fentry" } else { "kprobes" };
    // Programs that run on each reset, sent or received.
    let per_reset = 1 + u64::from(traits.socketless_send_reset);
    for (key, hooks) in [
        ("tcp_auto", auto),
        ("tcp_kprobes", "kprobes"),
        ("tcp_set_state", "set_state"),
    ] {
        let (ready, messages) = watching(run, label, key);
        let messages: Vec<&str> = messages.iter().map(String::as_str).collect();
        assert_eq!(ready["tcp_hooks"], hooks, "{label} {key}: {messages:?}");
        let fallback = hooks == "set_state";
        let attached = ready["attached"].as_str().unwrap_or_default();
        assert_eq!(
            attached.contains("\"inet_sock_set_state\""),
            fallback,
            "{label} {key}: {attached}"
        );
        assert_eq!(
            ready["set_state_hook"],
            if fallback { "tp_btf" } else { "off" },
            "{label} {key}"
        );
        let tcp_degraded: Vec<&&str> = messages
            .iter()
            .filter(|m| m.starts_with("degraded: TCP"))
            .collect();
        let expected = sidecar_race_agent::kernel::tcp_hooks::TcpCoverage::SetState {
            why: "--tcp-hooks=set-state".into(),
        }
        .degraded()
        .map(|s| format!("degraded: {s}"));
        assert_eq!(
            tcp_degraded.first().map(|s| s.to_string()),
            expected.filter(|_| fallback),
            "{label} {key}: one sentence, on the fallback only: {messages:?}"
        );
        assert!(tcp_degraded.len() <= 1, "{label} {key}: {messages:?}");

        let events = run.json(&format!("{key}_out"));
        let of =
            |kind: &str| -> Vec<&Value> { events.iter().filter(|e| e["kind"] == kind).collect() };
        let refused = of("refused");
        assert_eq!(refused.len(), 1, "{label} {key}: {refused:#?}");
        let r = refused[0];
        assert_eq!(r["dst"], "127.0.0.1:15006", "{label} {key}: {r}");
        assert_eq!(r["cgroup_id"], app_id, "{label} {key}: {r}");
        assert_eq!(r["container_id"], get(env, "POD1_APP").as_str(), "{r}");
        assert_eq!(r["comm"], "sr-app", "{label} {key}: {r}");
        for kind in ["listen", "listen_closed"] {
            let l = of(kind);
            assert_eq!(l.len(), 1, "{label} {key}: {kind}: {l:#?}");
            let e = l[0];
            assert_eq!(e["src"], "127.0.0.1:15005", "{label} {key}: {e}");
            assert_eq!(e["cgroup_id"], proxy_id, "{label} {key}: {e}");
            assert_eq!(e["comm"], "sr-proxy", "{label} {key}: {e}");
        }
        let apps = run.values(&format!("{key}_app"));
        assert_eq!(
            apps,
            [
                format!(
                    "sr-app: {CONNECTS} attempts to 127.0.0.1:15005: 0 refused, {CONNECTS} connected"
                ),
                format!(
                    "sr-app: {CONNECTS} attempts to 127.0.0.1:15005: 0 refused, {CONNECTS} connected"
                )
            ],
            "{label} {key}"
        );

        let got = runs(run, key);
        eprintln!(
            "{label} {key}: program runs: listen {}, per connect closed with a FIN {:.2}, \
             with a reset {:.2}, refusal {}, listener close {}",
            got.listen,
            got.fin as f64 / CONNECTS as f64,
            got.rst as f64 / CONNECTS as f64,
            got.refused,
            got.close
        );
        if fallback {
            // Every state change of both ends runs the program.
            assert!(got.fin >= CONNECTS * 5, "{label} {key}: {got:?}");
            assert_eq!(got.listen, 1, "{label} {key}: {got:?}");
            // SYN_SENT in and out, then the reset programs.
            assert_eq!(got.refused, 2 + per_reset, "{label} {key}: {got:?}");
        } else {
            let kprobes = hooks == "kprobes";
            // A reset that reaches a socket already in TIME_WAIT (the proxy closed its
            // end first and the kernel made it a time-wait socket) fires no
            // `tcp_receive_reset`: at most once each, never more.
            assert!(got.rst <= CONNECTS * per_reset, "{label} {key}: {got:?}");
            assert_eq!(
                got,
                Runs {
                    // A kprobe and its kretprobe.
                    listen: if kprobes { 2 } else { 1 },
                    fin: 0,
                    rst: got.rst,
                    refused: per_reset,
                    close: 1,
                },
                "{label} {key}"
            );
        }
    }
}

/// Unix sockets on this kernel, with the hooks `auto` picks (fexit where the kernel has
/// BPF trampolines: Debian's kernels have BTF; else kprobes), with kprobes forced and
/// with the syscall tracepoints asked for: the same refusals, with paths, errors and
/// owners; listeners up (and, with fexit and kprobes, their close).
fn assert_unix(run: &GuestRun, label: &str, traits: Traits) {
    let app_id = cgroup_id(run, &container_path("POD1", "APP"));
    // Debian's kernels have kprobes: what `auto` falls back to without fexit.
    assert_ne!(run.one("kprobe_pmu"), "none", "{label}");
    let auto = if traits.fexit { "fexit" } else { "kprobes" };
    for (key, hooks) in [
        ("uds_auto", auto),
        ("uds_kprobes", "kprobes"),
        ("uds_syscalls", "syscalls"),
    ] {
        let (ready, messages) = watching(run, label, key);
        let messages: Vec<&str> = messages.iter().map(String::as_str).collect();
        assert_eq!(ready["unix_hooks"], hooks, "{label} {key}: {messages:?}");
        if hooks != "syscalls" {
            // With BTF, kprobes see what fexit sees: nothing degraded.
            assert!(
                !messages.iter().any(|m| m.starts_with("degraded: Unix")),
                "{label} {key}: {messages:?}"
            );
        }
        let events = run.json(&format!("{key}_out"));
        let of =
            |kind: &str| -> Vec<&Value> { events.iter().filter(|e| e["kind"] == kind).collect() };
        let refused: Vec<(String, String)> = of("unix_refused")
            .iter()
            .map(|e| {
                assert_eq!(e["cgroup_id"], app_id, "{label} {key}: {e}");
                assert_eq!(e["comm"], "sr-uds", "{label} {key}: {e}");
                (
                    e["socket"]["path"].as_str().unwrap().to_string(),
                    e["socket"]["refusal"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let r = |p: &str, why: &str| (p.to_string(), why.to_string());
        assert_eq!(
            refused,
            [
                r("/tmp/uds.sock", "no_such_path"),
                r("/tmp/uds.sock", "no_such_path"),
                r("/tmp/uds.sock", "no_listener"),
                r("/tmp/statsd.sock", "no_such_path"),
            ],
            "{label} {key}: {events:#?}"
        );
        let listens = of("unix_listen");
        assert_eq!(listens.len(), 1, "{label} {key}: {events:#?}");
        assert_eq!(listens[0]["socket"]["path"], "/tmp/uds.sock");
        let closed = of("unix_listen_closed");
        eprintln!(
            "{label} {key} ({hooks}): {} refused, {} listen, {} closed",
            refused.len(),
            listens.len(),
            closed.len()
        );
        if hooks != "syscalls" {
            assert!(
                listens[0]["socket"]["inode"].is_u64(),
                "{label}: {}",
                listens[0]
            );
            assert!(
                listens[0]["socket"]["netns"].is_u64(),
                "{label}: {}",
                listens[0]
            );
            assert_eq!(
                closed.len(),
                1,
                "{label}: the killed listener's close: {events:#?}"
            );
        } else {
            assert!(
                closed.is_empty(),
                "{label}: the fallback sees no close: {events:#?}"
            );
        }
    }
}

/// What `kfree_skb` sees, as the agent's degraded lines name it.
const KFREE_SKB_CAPABILITY: &str = "UDP refusals over IPv6, and over IPv4 where icmp:icmp_send is \
     missing (datagrams to a pod's loopback port no socket holds; needs the drop reason NO_SOCKET, \
     5.17+)";

/// An x86_64 kernel from 5.17 (the drop reason) to before 6.10.
const BEFORE_6_10: Traits = Traits {
    socketless_send_reset: false,
    fexit: true,
    drop_reason: true,
    icmp_send: true,
};

#[test]
fn kernel_6_1_lts() {
    kernel_tier(Arch::Amd64, "6.1", BEFORE_6_10);
}

#[test]
fn kernel_6_12_lts() {
    kernel_tier(
        Arch::Amd64,
        "6.12",
        Traits {
            socketless_send_reset: true,
            ..BEFORE_6_10
        },
    );
}

#[test]
fn kernel_5_10_lts() {
    kernel_tier(
        Arch::Amd64,
        "5.10",
        Traits {
            drop_reason: false,
            icmp_send: false,
            ..BEFORE_6_10
        },
    );
}

/// The cross-built arm64 agent on Debian 12's arm64 cloud kernel. `cargo xtask test
/// arm64` cross-builds the binaries first, then runs it.
#[test]
#[ignore = "the arm64 kernel tier: `cargo xtask test arm64` cross-builds its binaries and runs it"]
fn kernel_6_1_arm64() {
    kernel_tier(
        Arch::Arm64,
        "6.1",
        Traits {
            fexit: false,
            ..BEFORE_6_10
        },
    );
}
