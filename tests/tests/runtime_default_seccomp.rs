//! The proof that `seccompProfile: RuntimeDefault` is enough: the agent runs in a real
//! container started by containerd — whose RuntimeDefault profile is the one `ctr run
//! --seccomp` applies (`contrib/seccomp.WithDefaultProfile`, the code the CRI plugin
//! uses for `RuntimeDefault`), generated from the container's final capability set —
//! with the DaemonSet's other settings: all capabilities dropped but BPF and PERFMON,
//! uid 0, no_new_privs, a read-only root filesystem, tracefs and the cgroup tree
//! mounted read-only. It must still load, attach, become ready and detect a simulated
//! startup race.
//!
//! The test starts its own containerd (private root, state and socket in a temporary
//! directory; no CRI plugin) and gives it the host's root filesystem as the
//! container's (`ctr run --rootfs` on a read-only bind mount of `/`), so no image is
//! needed. Unlike the pod, the container shares the host's network namespace, so the
//! test reaches the agent on loopback; that has nothing to do with seccomp.
//!
//! Needs containerd, ctr and runc (`cargo xtask setup` installs Debian's `containerd`
//! and `runc`). containerd before 1.6.9 (1.7.0 on the 1.7 line) allows `bpf` and
//! `perf_event_open` only with CAP_SYS_ADMIN: the agent fails there, and so does this
//! test.

use std::{
    fs::{self, File},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;
use sidecar_race_mountinfo as mountinfo;
use sidecar_race_testbed::containerd;
use sidecar_race_tests::{
    agent::agent_binary,
    cri::{spawn_containerd, wait_for},
    http::{free_port, get},
    root::{have, is_root_or_skip},
    scenario::assert_startup_race_detected,
};

/// The DaemonSet's `capabilities.add` (deploy/base/daemonset.yaml; that list is pinned
/// by tests/tests/deploy_manifests.rs), with their bit numbers.
const CAPS: [(&str, u32); 2] = [("CAP_BPF", 39), ("CAP_PERFMON", 38)];

/// A private containerd, the root filesystem given to the container, and the
/// container: all stopped, unmounted and removed on drop, even when the test fails.
struct Runtime {
    dir: PathBuf,
    containerd: Option<Child>,
    container: Option<(String, Child)>,
}

impl Runtime {
    fn start() -> Self {
        let dir = PathBuf::from(format!("/tmp/sr-seccomp-{}", std::process::id()));
        assert!(
            !mounted(&dir.join("rootfs")),
            "{}/rootfs is still mounted (a killed run?): umount it",
            dir.display()
        );
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let mut rt = Self {
            dir,
            containerd: None,
            container: None,
        };
        // Only what `ctr run --rootfs` needs: no CRI, no image snapshotters, and not
        // the `opt` plugin (it would create /opt/containerd).
        let config = containerd::Config {
            dir: &rt.dir,
            log_level: "info",
            cri: None,
        }
        .render();
        rt.containerd = Some(spawn_containerd(&rt.dir, &config));
        let deadline = Instant::now() + Duration::from_secs(20);
        while !rt
            .ctr()
            .arg("version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            if let Ok(Some(status)) = rt.containerd.as_mut().unwrap().try_wait() {
                panic!(
                    "containerd exited ({status}):\n{}",
                    rt.log("containerd.log")
                );
            }
            assert!(
                Instant::now() < deadline,
                "containerd did not answer within 20 s:\n{}",
                rt.log("containerd.log")
            );
            std::thread::sleep(Duration::from_millis(100));
        }

        // The container's root: the host's root filesystem, read-only (a bind mount,
        // not recursive: runc cannot pivot_root into `/` itself, and /proc, /sys, /dev
        // are the container's own).
        let rootfs = rt.dir.join("rootfs");
        fs::create_dir(&rootfs).unwrap();
        sh(Command::new("mount").arg("--bind").arg("/").arg(&rootfs));
        sh(Command::new("mount")
            .args(["-o", "remount,bind,ro"])
            .arg(&rootfs));
        rt
    }

    /// `ctr` talking to this containerd.
    fn ctr(&self) -> Command {
        let mut c = Command::new("ctr");
        c.arg("--address").arg(containerd::socket(&self.dir));
        c
    }

    /// The last 40 lines of a log in the runtime's directory.
    fn log(&self, name: &str) -> String {
        let text = fs::read_to_string(self.dir.join(name)).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// `ctr run` in the background; its output (the agent's) goes to `<id>.log`.
    fn run(&mut self, id: &str, args: &[String]) {
        let log = File::create(self.dir.join(format!("{id}.log"))).unwrap();
        let child = self
            .ctr()
            .arg("run")
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start ctr run");
        self.container = Some((id.to_string(), child));
    }

    fn container_log(&self) -> String {
        let id = &self.container.as_ref().unwrap().0;
        self.log(&format!("{id}.log"))
    }

    /// The `ctr run` process's exit status, if it has exited.
    fn exited(&mut self) -> Option<ExitStatus> {
        self.container.as_mut().unwrap().1.try_wait().ok().flatten()
    }

    /// Host pid of the container's process.
    fn task_pid(&self, id: &str) -> u32 {
        let out = self.ctr().args(["task", "ls"]).output().unwrap();
        let ls = String::from_utf8_lossy(&out.stdout);
        ls.lines()
            .find_map(|l| {
                let mut f = l.split_whitespace();
                (f.next() == Some(id)).then(|| f.next()?.parse().ok())?
            })
            .unwrap_or_else(|| panic!("no task {id} in `ctr task ls`:\n{ls}"))
    }

    /// The OCI spec containerd generated for the container.
    fn spec(&self, id: &str) -> Value {
        let out = self.ctr().args(["container", "info", id]).output().unwrap();
        assert!(out.status.success(), "ctr container info {id} failed");
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["Spec"].clone()
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some((id, mut child)) = self.container.take() {
            if child.try_wait().ok().flatten().is_none() {
                let _ = self
                    .ctr()
                    .args(["task", "kill", "-s", "SIGKILL", &id])
                    .output();
                if wait_for(&mut child, Duration::from_secs(10)).is_none() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
            // `ctr run --rm` removes both when it gets to; make sure.
            let _ = self.ctr().args(["task", "delete", "-f", &id]).output();
            let _ = self.ctr().args(["container", "delete", &id]).output();
        }
        if let Some(mut containerd) = self.containerd.take() {
            // SAFETY: kill(2) of our own child.
            unsafe { libc::kill(containerd.id() as i32, libc::SIGTERM) };
            if wait_for(&mut containerd, Duration::from_secs(10)).is_none() {
                let _ = containerd.kill();
                let _ = containerd.wait();
            }
        }
        let rootfs = self.dir.join("rootfs");
        if mounted(&rootfs)
            && !Command::new("umount")
                .arg(&rootfs)
                .status()
                .is_ok_and(|s| s.success())
        {
            let _ = Command::new("umount").arg("-l").arg(&rootfs).status();
        }
        // Only once the bind mount is gone: remove_dir_all must not walk into `/`.
        if !mounted(&rootfs) {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

fn mounted(path: &Path) -> bool {
    mountinfo::read_self()
        .unwrap_or_default()
        .iter()
        .any(|m| m.mount_point == path)
}

fn sh(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn version(tool: &str) -> String {
    Command::new(tool)
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_default()
}

#[test]
fn the_agent_works_under_containerds_runtime_default_seccomp_profile() {
    if !is_root_or_skip("the_agent_works_under_containerds_runtime_default_seccomp_profile") {
        return;
    }
    for tool in ["containerd", "ctr", "runc"] {
        assert!(
            have(tool),
            "`{tool}` is missing: this test runs the agent in a containerd container \
             (Debian packages containerd and runc); run `cargo xtask setup`"
        );
    }
    let containerd_version = version("containerd");
    eprintln!("runtime: {containerd_version}; {}", version("runc"));

    // The host paths the DaemonSet mounts must be there, as on a node.
    let tracefs = Path::new("/sys/kernel/tracing");
    if !tracefs.join("events").is_dir() {
        sh(Command::new("mount")
            .args(["-t", "tracefs", "nodev"])
            .arg(tracefs));
    }
    assert!(Path::new("/sys/fs/cgroup").is_dir());

    // `drop: [ALL]`: everything in containerd's default set, as the CRI plugin does.
    let default_spec: Value = serde_json::from_slice(
        &Command::new("ctr")
            .args(["oci", "spec"])
            .output()
            .expect("ctr oci spec")
            .stdout,
    )
    .expect("`ctr oci spec` prints JSON");
    let add: Vec<&str> = CAPS.iter().map(|c| c.0).collect();
    let drop: Vec<String> = default_spec["process"]["capabilities"]["bounding"]
        .as_array()
        .expect("default capabilities")
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .filter(|c| !add.contains(&c.as_str()))
        .collect();

    let agent = agent_binary();
    let agent_dir = agent.parent().unwrap().display().to_string();
    let addr = format!("127.0.0.1:{}", free_port());
    let id = format!("sr-seccomp-{}", std::process::id());

    let mut rt = Runtime::start();
    let rootfs = rt.dir.join("rootfs");
    let mut args: Vec<String> = [
        "--rm",
        "--rootfs",
        // readOnlyRootFilesystem: true
        "--read-only",
        // Only so that the test reaches the agent on 127.0.0.1.
        "--net-host",
        // RuntimeDefault: containerd's default profile, generated after the
        // capabilities below are applied (as the CRI plugin does).
        "--seccomp",
    ]
    .map(String::from)
    .to_vec();
    for c in &add {
        args.extend(["--cap-add".into(), c.to_string()]);
    }
    for c in &drop {
        args.extend(["--cap-drop".into(), c.clone()]);
    }
    args.extend([
        // A leaf cgroup runc removes with the container.
        "--cgroup".into(),
        format!("/{id}"),
        // The DaemonSet's two hostPath volumes, read-only.
        "--mount".into(),
        "type=bind,src=/sys/kernel/tracing,dst=/sys/kernel/tracing,options=rbind:ro".into(),
        "--mount".into(),
        "type=bind,src=/sys/fs/cgroup,dst=/sys/fs/cgroup,options=rbind:ro".into(),
        // The agent, wherever the target directory is mounted.
        "--mount".into(),
        format!("type=bind,src={agent_dir},dst={agent_dir},options=rbind:ro"),
        "--env".into(),
        "SIDECAR_RACE_LOG_FORMAT=json".into(),
        rootfs.display().to_string(),
        id.clone(),
        agent.display().to_string(),
    ]);
    args.extend(
        [
            "run",
            "--listen",
            &addr,
            "--pods-from",
            "none",
            "--events=false",
        ]
        .map(String::from),
    );
    rt.run(&id, &args);

    let deadline = Instant::now() + Duration::from_secs(30);
    while get(&addr, "/readyz").map(|r| r.0) != Some(200) {
        if let Some(status) = rt.exited() {
            panic!(
                "the agent's container exited ({status}) under {containerd_version}'s \
                 RuntimeDefault seccomp profile with only {add:?}:\n{}\ncontainerd:\n{}",
                rt.container_log(),
                rt.log("containerd.log")
            );
        }
        assert!(
            Instant::now() < deadline,
            "agent not ready on {addr} within 30 s:\n{}",
            rt.container_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // It really runs under a seccomp filter, with only those capabilities, as uid 0
    // and with no_new_privs ...
    let pid = rt.task_pid(&id);
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
            .trim()
            .to_string()
    };
    assert_eq!(field("Seccomp:"), "2", "seccomp filter mode");
    let want: u64 = CAPS.iter().map(|c| 1u64 << c.1).sum();
    for set in ["CapEff:", "CapPrm:", "CapBnd:"] {
        assert_eq!(
            u64::from_str_radix(&field(set), 16).unwrap(),
            want,
            "{set} of the agent"
        );
    }
    assert_eq!(field("NoNewPrivs:"), "1");
    assert!(field("Uid:").split_whitespace().all(|u| u == "0"));
    // ... and the filter is containerd's default profile, made for those capabilities:
    // everything not listed fails with an errno, and `bpf` and `perf_event_open` are
    // allowed only because CAP_BPF and CAP_PERFMON are in the bounding set.
    let spec = rt.spec(&id);
    let seccomp = &spec["linux"]["seccomp"];
    assert_eq!(seccomp["defaultAction"], "SCMP_ACT_ERRNO", "{seccomp}");
    assert_eq!(
        spec["process"]["capabilities"]["bounding"],
        serde_json::json!(add),
        "bounding set in the spec"
    );
    for syscall in ["bpf", "perf_event_open"] {
        assert!(
            seccomp["syscalls"].as_array().unwrap().iter().any(|r| {
                r["action"] == "SCMP_ACT_ALLOW"
                    && r["names"].as_array().unwrap().iter().any(|n| n == syscall)
            }),
            "{syscall} is not allowed by the profile: {seccomp}"
        );
    }
    assert_eq!(spec["root"]["readonly"], true);

    assert_startup_race_detected(&addr, "seccomp");

    // A clean stop, as the kubelet stops it.
    sh(rt.ctr().args(["task", "kill", "-s", "SIGTERM", &id]));
    let (_, child) = rt.container.as_mut().unwrap();
    let status = wait_for(child, Duration::from_secs(10)).expect("the agent stops on SIGTERM");
    assert!(status.success(), "{}", rt.container_log());
}
