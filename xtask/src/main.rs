//! `cargo xtask <setup|build|test|demo>`: the project's own automation. Depends on
//! nothing that needs the eBPF toolchain, so it can install that toolchain.

mod arm64_tier;
mod bench;
mod cluster;
mod cross;
mod demo;
mod guest_userland;
mod host;
mod image;
mod kernels;
mod krew;
mod private_apt;
mod run;
mod setup;
mod skipped;
mod soak;

use clap::{Parser, Subcommand};
use setup::Tier;

#[derive(Parser)]
#[command(name = "xtask", about = "Set up, build, test and demo sidecar-race")]
struct Cli {
    #[command(subcommand)]
    command: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what the build and the tests need, when missing (apt-get, cargo install).
    Setup,
    /// Set up, then build the agent (with its embedded eBPF object) and the test kit.
    Build,
    /// Set up, then build the agent's container image offline: a statically linked
    /// agent in a FROM-scratch image, written as an OCI image archive under
    /// target/image/ (for `ctr images import`, `docker load`, `podman load`, `skopeo`).
    Image {
        /// The image reference recorded in the archive.
        #[arg(long, default_value_t = format!("{}:{}", image::REPOSITORY, image::VERSION))]
        name: String,
        /// The architectures (amd64, arm64; the host's by default): one image index
        /// holding each. arm64 is cross-built on an x86_64 host with Debian's
        /// toolchain (see deploy/README.md).
        #[arg(long, value_delimiter = ',')]
        arch: Vec<String>,
    },
    /// Set up, then build the kubectl plugin's krew archive and manifest under
    /// target/krew/ (`kubectl krew install --manifest=… --archive=…`).
    Krew {
        /// The architectures (amd64, arm64; the host's by default), as for `image`.
        #[arg(long, value_delimiter = ',')]
        arch: Vec<String>,
    },
    /// Set up, build, and run every test tier (root tiers fail when not root, unless
    /// SIDECAR_RACE_SKIP_ROOT=1 lets them skip; the summary counts the skipped).
    /// `cargo xtask test arm64 [ARGS]` sets up, builds and runs the arm64 kernel tier
    /// alone.
    Test {
        /// Extra arguments for `cargo test` (e.g. a test name filter).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Set up, build, then make a real startup race in a simulated pod and show what
    /// the agent saw.
    Demo {
        /// On a throwaway cluster instead (`cluster up`, root): the Event, the metric
        /// through Prometheus, `report` and `lint --fix`; then `cluster down`.
        #[arg(long)]
        cluster: bool,
    },
    /// A throwaway single-node Kubernetes (built by setup) with the agent installed
    /// from deploy/ (root): `up`, `down`, `status`. See docs/cluster.md.
    Cluster {
        #[command(subcommand)]
        action: cluster::Action,
    },
    /// Set up, build (release), measure what the agent costs and write BENCHMARKS.md.
    Bench {
        /// A few seconds with debug builds, nothing asserted, report written under
        /// target/ (the test suite runs this so the harness does not rot).
        #[arg(long)]
        smoke: bool,
        /// Only these parts, comma-separated (for profiling one figure); the partial
        /// report goes to target/bench-only/BENCHMARKS.md, never over BENCHMARKS.md.
        #[arg(long, value_delimiter = ',')]
        only: Vec<bench::Part>,
    },
    /// Set up, build (release), run the agent under pod churn and a refusal storm for
    /// N minutes, and check it neither grows nor loses incidents (root).
    Soak {
        #[arg(long, default_value_t = 30.0)]
        minutes: f64,
        /// Restart the agent mid-race this often (pinned state, checkpoint); 0: never.
        #[arg(long, default_value_t = 5.0)]
        restart_every_minutes: f64,
        /// Where the summary table goes (default target/soak/SOAK.md).
        #[arg(long)]
        out: Option<std::path::PathBuf>,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Task::Setup => setup::ensure(Tier::Test),
        Task::Build => {
            setup::ensure(Tier::Build)?;
            demo::build()
        }
        Task::Image { name, arch } => {
            ensure_for_arches(&arch)?;
            let built = image::image(Some(name), &arch)?;
            println!(
                "{}\n{} {}",
                built.archive.display(),
                built.reference,
                built.digest
            );
            Ok(())
        }
        Task::Krew { arch } => {
            ensure_for_arches(&arch)?;
            let built = krew::krew(&arch)?;
            println!("{}", built.manifest.display());
            for archive in built.archives {
                println!("{}", archive.display());
            }
            Ok(())
        }
        Task::Test { args } if args.first().is_some_and(|a| a == arm64_tier::NAME) => {
            setup::ensure(Tier::Test)?;
            build_all()?;
            let mut tally = run::Tally::default();
            let result = arm64_tier::test_tier(&args[..1], &args[1..], &mut tally);
            tally.print();
            result
        }
        Task::Test { args } => {
            setup::ensure(Tier::Test)?;
            if cluster::wants_1_37(&args) {
                setup::ensure_kubernetes(cluster::Kubernetes::V1_37)?;
            }
            build_all()?;
            // The real-runtime tier (tests/tests/cri_runtime.rs) runs the agent from it.
            image::image(None, &[])?;
            // The krew tier (tests/tests/krew_plugin.rs) installs the plugin from it.
            krew::krew(&[])?;
            let mut cmd = run::cargo();
            cmd.args(["test", "--workspace", "--no-fail-fast"])
                .args(&args);
            let mut tally = run::Tally::default();
            let tiers = run::tests(&mut cmd, &mut tally);
            // The kernel tier on arm64, with its own cross-build; its VM after the
            // amd64 ones.
            let arm64 = arm64_tier::test_tier(&args, &[], &mut tally);
            // Real pods on a real kubelet: its own cluster, after the other tiers.
            let cluster = cluster::test_tier(&args, &mut tally);
            tally.print();
            tiers.and(arm64).and(cluster)
        }
        Task::Bench { smoke, only } => {
            let root = run::workspace_root();
            let (bin, out) = if smoke {
                build_all()?;
                (
                    run::target_dir().join("debug"),
                    root.join("target/bench-smoke/BENCHMARKS.md"),
                )
            } else {
                setup::ensure(Tier::Bench)?;
                run::checked(run::cargo().args(["build", "--release", "--workspace", "--bins"]))?;
                (
                    run::target_dir().join("release"),
                    root.join("BENCHMARKS.md"),
                )
            };
            let out = if only.is_empty() {
                out
            } else {
                root.join("target/bench-only/BENCHMARKS.md")
            };
            bench::bench(&bin, smoke, &bench::Parts::only(only), &out)
        }
        Task::Cluster { action } => {
            if let cluster::Action::Up {
                runtime,
                kubernetes,
            } = action
            {
                setup::ensure(Tier::Cluster)?;
                if runtime == cluster::Runtime::CriO {
                    setup::ensure_cri_o()?;
                }
                if kubernetes != cluster::Kubernetes::V1_34 {
                    setup::ensure_kubernetes(kubernetes)?;
                }
            }
            cluster::run(action)
        }
        Task::Soak {
            minutes,
            restart_every_minutes,
            out,
        } => {
            setup::ensure(Tier::Demo)?;
            soak::soak(minutes, restart_every_minutes, out)
        }
        Task::Demo { cluster: false } => demo::simulated(),
        Task::Demo { cluster: true } => demo::on_cluster(),
    }
}

/// Every binary of the workspace (the test tiers run the test kit's too).
fn build_all() -> anyhow::Result<()> {
    run::checked(run::cargo().args(["build", "--workspace", "--bins"]))
}

/// `image` and `krew`: the build's tier, and the cross toolchain for an arm64 build.
fn ensure_for_arches(arches: &[String]) -> anyhow::Result<()> {
    let host = image::target()?.1;
    if arches.iter().any(|a| a != host) {
        setup::ensure_cross()
    } else {
        setup::ensure(Tier::Build)
    }
}
