//! `cargo xtask cluster up | down | status`: a throwaway single-node Kubernetes on this
//! machine, built from source (Go modules, no image pulls), with the agent installed
//! from `deploy/` the way the README tells a user. Also what the `cluster` test tier
//! runs against (tests/tests/cluster.rs).
//!
//! Everything stays on this machine: the control plane listens on loopback or on the
//! node's own bridge, whose address is the node IP; the Service CIDR is routed to that
//! bridge, so a packet kube-proxy did not translate never leaves through the default
//! route. See docs/cluster.md.

mod bpffs;
pub mod build;
mod clients;
mod down;
mod egress;
pub mod go_module;
mod host;
mod host_check;
mod install;
pub mod kubernetes;
mod modules;
mod node;
mod operator;
pub mod otelcol;
mod pki;
mod procs;
pub mod runtime;
pub mod sidecars;
mod status;
mod up;
mod versions;

use clap::Subcommand;

pub use build::ensure as build_binaries;
pub use down::down;
pub use kubernetes::Kubernetes;
pub use runtime::Runtime;
pub use up::up;

#[derive(Subcommand)]
pub enum Action {
    /// Start the cluster and install the agent (and deploy/monitoring); prints the
    /// kubeconfig path.
    Up {
        /// The node's container runtime (`cri-o` needs the test tier's set-up).
        #[arg(long, value_enum, default_value = "containerd")]
        runtime: Runtime,
        /// The node's Kubernetes: 1.36 runs on containerd 2 and runc built by the
        /// set-up (`cargo xtask setup`, or this `up`).
        #[arg(long, value_enum, default_value = "1.34")]
        kubernetes: Kubernetes,
    },
    /// Stop everything `up` started and remove what it made.
    Down,
    /// Say what runs.
    Status,
}

pub fn run(action: Action) -> anyhow::Result<()> {
    match action {
        Action::Up {
            runtime,
            kubernetes,
        } => {
            let kubeconfig = up(runtime, kubernetes)?;
            println!("{}", kubeconfig.display());
            Ok(())
        }
        Action::Down => down(),
        Action::Status => status::print(),
    }
}

/// The cases the tier runs again on CRI-O and on Kubernetes 1.36 and 1.37: its core (a
/// classic startup race, a native sidecar quiet with its startupProbe and raced
/// without, a drain at a rollout, a stuck Job), and the agent Ready as the DaemonSet
/// runs it there.
const CORE_CASES: [&str; 5] = [
    "the_agent_runs_as_the_daemonset_says_on_the_pinned_kubernetes",
    "case1_classic_sidecar_late_listener_in_a_deployment",
    "case2_native_sidecar_with_a_startup_probe_has_no_race_and_without_one_gets_the_native_advice",
    "case3_rollout_restart_drains_a_classic_sidecar_before_its_app",
    "case4_a_job_kept_alive_by_its_classic_sidecar_is_stuck_until_deleted",
];

/// The files of the lifecycles the newer kubelets run (native sidecars as the default,
/// container restart rules), whose cases run whole on the 1.36 and 1.37 variants.
const NEWER_NODE_TESTS: [&str; 2] = ["cluster_native_era", "cluster_restart_rules"];

/// `cargo xtask test kube-1.36` runs only the Kubernetes 1.36 variant of the tier.
pub const KUBE_1_36: &str = "kube-1.36";
/// `cargo xtask test kube-1.37` runs only the Kubernetes 1.37 variant, which the
/// default `cargo xtask test` leaves out (its own build and cluster, for a variant
/// that proves what 1.36 proves; docs/cluster.md).
pub const KUBE_1_37: &str = "kube-1.37";

/// A variant of the tier: its runtime, its Kubernetes, and the `cargo test` runs of its
/// cases on one cluster.
type Variant = (Runtime, Kubernetes, Vec<std::process::Command>);

/// The variants `cargo xtask test ARGS` runs (none when `args` name another tier).
fn variants(args: &[String]) -> Vec<Variant> {
    let named = |what: &str| args.iter().any(|a| a.contains(what));
    let (only_cri_o, only_1_36, only_1_37) = (named("cri-o"), named(KUBE_1_36), wants_1_37(args));
    let all = !only_cri_o && !only_1_36 && !only_1_37;
    if all && !args.is_empty() && !named("cluster") {
        return Vec::new();
    }
    let mut variants = Vec::new();
    if all {
        let mut cmd = cases_command(&[
            "--test",
            "cluster",
            "--test",
            "cluster_helm",
            "--test",
            "cluster_admission",
            "--test",
            "cluster_real_sidecars",
            "--test",
            "cluster_datagrams",
        ]);
        cmd.args(["--", "--ignored", "--test-threads=1"]);
        for awaiting in AWAITING_THE_AGENT {
            cmd.args(["--skip", awaiting]);
        }
        variants.push((Runtime::Containerd, Kubernetes::V1_34, vec![cmd]));
    }
    let core = || {
        let mut cmd = cases_command(&["--test", "cluster"]);
        cmd.args(["--", "--ignored", "--test-threads=1", "--exact"])
            .args(CORE_CASES);
        cmd
    };
    // The newer nodes' own files, whole.
    let newer = || {
        let mut cmd = cases_command(
            &NEWER_NODE_TESTS
                .iter()
                .flat_map(|t| ["--test", t])
                .collect::<Vec<_>>(),
        );
        cmd.args(["--", "--ignored", "--test-threads=1"]);
        cmd
    };
    if all || only_cri_o {
        variants.push((Runtime::CriO, Kubernetes::V1_34, vec![core()]));
    }
    if all || only_1_36 {
        variants.push((
            Runtime::Containerd2,
            Kubernetes::V1_36,
            vec![core(), newer()],
        ));
    }
    if only_1_37 {
        // Built by main's `setup::ensure_kubernetes` first (`wants_1_37`), not by
        // `cargo xtask setup`, which builds 1.36 only.
        variants.push((
            Runtime::Containerd2,
            Kubernetes::V1_37,
            vec![core(), newer()],
        ));
    }
    variants
}

/// `cargo xtask test`'s cluster tier, after the others: a cluster on containerd for
/// tests/tests/cluster.rs, cluster_helm.rs, cluster_admission.rs,
/// cluster_real_sidecars.rs and cluster_datagrams.rs (their cases are `#[ignore]`d in a plain `cargo test`),
/// one case at a time, then `down`; then a cluster on CRI-O for `CORE_CASES`, then
/// `down`; then Kubernetes 1.36 on containerd 2 for `CORE_CASES` and the
/// `NEWER_NODE_TESTS`, then `down`. Each `down` is checked to leave the host as its
/// `up` found it. When an `up` fails its cases still run and each fails with the
/// reason. Runs when `args` is empty or names the tier; `cri-o`, `kube-1.36` or
/// `kube-1.37` runs only that variant (1.37 only when named).
pub fn test_tier(args: &[String], tally: &mut crate::run::Tally) -> anyhow::Result<()> {
    let variants = variants(args);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        const WHY: &str = "the cluster tier needs root (a kubelet, a container runtime, kube-proxy); CI runs as root";
        if std::env::var("SIDECAR_RACE_SKIP_ROOT").as_deref() == Ok("1") {
            // Each case counts as one skip, as it would as one test.
            for (_, _, cmds) in variants {
                for mut cmd in cmds {
                    let cases = cases(&mut cmd)?;
                    eprintln!("SKIPPED {cases} cluster cases: {WHY}");
                    tally.skip_tests(cases, WHY);
                }
            }
            return Ok(());
        }
        anyhow::bail!("{WHY} (set SIDECAR_RACE_SKIP_ROOT=1 to skip it)");
    }
    let mut result = Ok(());
    for (runtime, kubernetes, mut cmds) in variants {
        let ran = run_on(runtime, kubernetes, &mut cmds, tally);
        result = result.and(ran);
    }
    result
}

/// Whether `cargo xtask test ARGS` runs the 1.37 variant, whose Kubernetes the test
/// tier's set-up does not build.
pub fn wants_1_37(args: &[String]) -> bool {
    args.iter().any(|a| a.contains(KUBE_1_37))
}

/// Cases that prove what the agent does not do yet on the real kubelet: `#[ignore]`d
/// like the others, and skipped here so that `--ignored` does not run them (by hand
/// they run and fail with the reason). Remove a name when the agent does it; none now
/// (case 19, the statsd exporter's UDP bind, left with the DaemonSet's `hostPID`).
const AWAITING_THE_AGENT: [&str; 0] = [];

/// `cargo test -p sidecar-race-tests` of the tier's `tests` targets.
fn cases_command(tests: &[&str]) -> std::process::Command {
    let mut cmd = crate::run::cargo();
    cmd.args(["test", "--no-fail-fast", "-p", "sidecar-race-tests"])
        .args(tests);
    cmd
}

/// `up` of `kubernetes` on `runtime`, the cases of each of `cmds` on that one cluster,
/// `down`, and the check of the host.
fn run_on(
    runtime: Runtime,
    kubernetes: Kubernetes,
    cmds: &mut [std::process::Command],
    tally: &mut crate::run::Tally,
) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    // A leftover's saved sysctls are put back first, so the check below reads the
    // host as it is without any cluster.
    let earlier = up::clear_earlier();
    let host_before = host_check::before();
    let up = earlier.and_then(|()| up(runtime, kubernetes));
    for cmd in cmds.iter_mut() {
        set_case_env(cmd, runtime, kubernetes, &up);
    }
    let variant = format!("Kubernetes {} on {}", kubernetes.version(), runtime.label());
    eprintln!("xtask: the cluster tier on {variant}");
    let mut result = Ok(());
    for cmd in cmds.iter_mut() {
        result = result.and(crate::run::tests(cmd, tally));
    }
    let taken_down = if up.is_ok() { down() } else { Ok(()) };
    // Also when `down` failed: the machine's own ip_forward is put back.
    let host = host_check::after(host_before);
    let host_ok = host.is_ok();
    let check = match runtime {
        Runtime::Containerd => "cluster_down_leaves_the_host_as_up_found_it".to_string(),
        other => format!(
            "cluster_down_on_{}_leaves_the_host_as_up_found_it",
            other.label().replace('-', "_")
        ),
    };
    tally.record(&check, host);
    taken_down?;
    anyhow::ensure!(host_ok, "the cluster left the host changed (see above)");
    eprintln!(
        "xtask: cluster tier on {variant} (up, cases, down) took {} s",
        started.elapsed().as_secs()
    );
    result
}

/// What the kit reads of the cluster `up` started (or why it did not).
fn set_case_env(
    cmd: &mut std::process::Command,
    runtime: Runtime,
    kubernetes: Kubernetes,
    up: &anyhow::Result<std::path::PathBuf>,
) {
    // The kit checks every container ID against it, and the node against the versions.
    cmd.env("SIDECAR_RACE_CLUSTER_RUNTIME", runtime.name())
        .env("SIDECAR_RACE_KUBERNETES_VERSION", kubernetes.version());
    if let Some(version) = runtime.built_version() {
        cmd.env("SIDECAR_RACE_CLUSTER_RUNTIME_VERSION", version);
    }
    match up {
        Ok(kubeconfig) => {
            cmd.env("SIDECAR_RACE_KUBECONFIG", kubeconfig)
                .env("SIDECAR_RACE_KUBECTL", kubernetes.bin("kubectl"))
                .env("SIDECAR_RACE_HELM", build::helm_bin())
                .env("SIDECAR_RACE_PROMETHEUS_BIN", build::prometheus_bin());
            // Setup downloaded it; if it cannot be found, the case that needs it says why.
            match build::scc_crd() {
                Ok(crd) => cmd.env("SIDECAR_RACE_SCC_CRD", crd),
                Err(e) => cmd.env("SIDECAR_RACE_SCC_CRD_ERROR", format!("{e:#}")),
            };
        }
        Err(e) => {
            cmd.env("SIDECAR_RACE_CLUSTER_ERROR", format!("{e:#}"));
        }
    }
}

/// How many cases `cmd` (the tier's `cargo test … -- --ignored`) would run, as libtest
/// lists them.
fn cases(cmd: &mut std::process::Command) -> anyhow::Result<u64> {
    let out = cmd
        .arg("--list")
        .stderr(std::process::Stdio::inherit())
        .output()?;
    anyhow::ensure!(out.status.success(), "cannot list the cluster cases");
    Ok(listed_tests(&String::from_utf8_lossy(&out.stdout)))
}

/// The tests in libtest's `--list` output (`name: test` lines; benches and the
/// summary line are not tests).
fn listed_tests(list: &str) -> u64 {
    list.lines().filter(|l| l.ends_with(": test")).count() as u64
}

#[cfg(test)]
mod tests {
    use super::{AWAITING_THE_AGENT, Kubernetes, listed_tests, variants};

    /// Each variant's Kubernetes, and the `cargo test` arguments of each of its runs.
    fn planned(args: &[&str]) -> Vec<(Kubernetes, Vec<String>)> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        variants(&args)
            .into_iter()
            .flat_map(|(_, k, cmds)| {
                cmds.into_iter().map(move |c| {
                    let a = c.get_args().map(|a| a.to_string_lossy().into_owned());
                    (k, a.collect())
                })
            })
            .collect()
    }

    #[test]
    fn kubernetes_1_37_runs_only_when_named_and_both_newer_nodes_run_their_files() {
        let default: Vec<Kubernetes> = planned(&[]).into_iter().map(|(k, _)| k).collect();
        assert!(!default.contains(&Kubernetes::V1_37), "{default:?}");
        assert!(default.contains(&Kubernetes::V1_36), "{default:?}");
        for (name, kubernetes) in [
            ("kube-1.36", Kubernetes::V1_36),
            ("kube-1.37", Kubernetes::V1_37),
        ] {
            let runs = planned(&[name]);
            assert!(
                runs.iter().all(|(k, _)| *k == kubernetes),
                "{name}: {runs:?}"
            );
            let newer = runs
                .iter()
                .find(|(_, a)| a.iter().any(|x| x == "cluster_native_era"))
                .unwrap_or_else(|| panic!("{name} runs no native-era file: {runs:?}"));
            assert!(
                newer.1.iter().any(|x| x == "cluster_restart_rules"),
                "{newer:?}"
            );
            // Nothing is skipped: KEP-5532's in-place restart case runs with the rest.
            assert!(!newer.1.iter().any(|x| x == "--skip"), "{newer:?}");
        }
        assert!(planned(&["--test", "house"]).is_empty());
        // What awaits the agent is skipped on 1.34, or `--ignored` would run it.
        let default = planned(&[]);
        let datagrams = default
            .iter()
            .find(|(_, a)| a.iter().any(|x| x == "cluster_datagrams"))
            .unwrap_or_else(|| panic!("no run of cluster_datagrams: {default:?}"));
        assert_eq!(datagrams.0, Kubernetes::V1_34);
        for awaiting in AWAITING_THE_AGENT {
            assert!(datagrams.1.iter().any(|x| x == awaiting), "{datagrams:?}");
        }
    }

    #[test]
    fn each_listed_case_counts() {
        let list = "a_case: test\nanother_case: test\n\n2 tests, 0 benchmarks\n";
        assert_eq!(listed_tests(list), 2);
        assert_eq!(listed_tests("0 tests, 0 benchmarks\n"), 0);
    }
}
