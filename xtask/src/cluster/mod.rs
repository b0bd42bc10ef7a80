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
mod containerd;
mod down;
mod egress;
mod host;
mod host_check;
mod install;
mod modules;
mod node;
mod operator;
pub mod otelcol;
mod pki;
mod procs;
pub mod sidecars;
mod status;
mod up;
mod versions;

use clap::Subcommand;

pub use build::ensure as build_binaries;
pub use down::down;
pub use up::up;

#[derive(Subcommand)]
pub enum Action {
    /// Start the cluster and install the agent (and deploy/monitoring); prints the
    /// kubeconfig path.
    Up,
    /// Stop everything `up` started and remove what it made.
    Down,
    /// Say what runs.
    Status,
}

pub fn run(action: Action) -> anyhow::Result<()> {
    match action {
        Action::Up => {
            let kubeconfig = up()?;
            println!("{}", kubeconfig.display());
            Ok(())
        }
        Action::Down => down(),
        Action::Status => status::print(),
    }
}

/// `cargo xtask test`'s cluster tier, after the others: a cluster for
/// tests/tests/cluster.rs, cluster_helm.rs and cluster_admission.rs (their cases are
/// `#[ignore]`d in a plain `cargo test`), one
/// case at a time, then `down`. When `up` fails the tier still runs and every case
/// fails with the reason. Runs when `args` is empty or names the tier.
pub fn test_tier(args: &[String], tally: &mut crate::run::Tally) -> anyhow::Result<()> {
    if !args.is_empty() && !args.iter().any(|a| a.contains("cluster")) {
        return Ok(());
    }
    let mut cmd = crate::run::cargo();
    cmd.args([
        "test",
        "--no-fail-fast",
        "-p",
        "sidecar-race-tests",
        "--test",
        "cluster",
        "--test",
        "cluster_helm",
        "--test",
        "cluster_admission",
        "--test",
        "cluster_real_sidecars",
        "--",
        "--ignored",
        "--test-threads=1",
    ]);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        const WHY: &str =
            "the cluster tier needs root (a kubelet, containerd, kube-proxy); CI runs as root";
        if std::env::var("SIDECAR_RACE_SKIP_ROOT").as_deref() == Ok("1") {
            // Each case counts as one skip, as it would as one test.
            let cases = cases(&mut cmd)?;
            eprintln!("SKIPPED {cases} cluster cases: {WHY}");
            tally.skip_tests(cases, WHY);
            return Ok(());
        }
        anyhow::bail!("{WHY} (set SIDECAR_RACE_SKIP_ROOT=1 to skip it)");
    }
    let started = std::time::Instant::now();
    // A leftover's saved sysctls are put back first, so the check below reads the
    // host as it is without any cluster.
    let earlier = up::clear_earlier();
    let host_before = host_check::before();
    let up = earlier.and_then(|()| up());
    match &up {
        Ok(kubeconfig) => {
            cmd.env("SIDECAR_RACE_KUBECONFIG", kubeconfig)
                .env("SIDECAR_RACE_KUBECTL", build::kubernetes_bin("kubectl"))
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
    let result = crate::run::tests(&mut cmd, tally);
    let taken_down = if up.is_ok() { down() } else { Ok(()) };
    // Also when `down` failed: the machine's own ip_forward is put back.
    let host = host_check::after(host_before);
    let host_ok = host.is_ok();
    tally.record("cluster_down_leaves_the_host_as_up_found_it", host);
    taken_down?;
    anyhow::ensure!(host_ok, "the cluster left the host changed (see above)");
    eprintln!(
        "xtask: cluster tier (up, cases, down) took {} s",
        started.elapsed().as_secs()
    );
    result
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
    use super::listed_tests;

    #[test]
    fn each_listed_case_counts() {
        let list = "a_case: test\nanother_case: test\n\n2 tests, 0 benchmarks\n";
        assert_eq!(listed_tests(list), 2);
        assert_eq!(listed_tests("0 tests, 0 benchmarks\n"), 0);
    }
}
