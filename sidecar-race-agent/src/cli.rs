//! Command-line interface (a public interface: documented in the README). Every flag
//! can also be set through the environment variable named in its help.

use std::{collections::BTreeSet, net::SocketAddr, path::PathBuf, time::Duration};

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use crate::{
    agent::AgentOptions,
    detect::DetectorConfig,
    events::Kind,
    inventory::sources::{PodSourceSpec, SourceOptions},
    kernel::probes::ProbeOptions,
};

#[derive(Debug, Parser)]
#[command(
    name = "sidecar-race-agent",
    version,
    about = "Sees sidecar startup and drain races in the kernel"
)]
pub struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, env = "SIDECAR_RACE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log filter (tracing's env-filter syntax), e.g. `info` or `sidecar_race_agent=debug`.
    #[arg(long, global = true, env = "SIDECAR_RACE_LOG", default_value = "info")]
    pub log_level: String,
    #[command(subcommand)]
    pub command: Command,
}

/// The binary's name as a kubectl plugin: `kubectl sidecar-race …` runs it.
pub const KUBECTL_PLUGIN: &str = "kubectl-sidecar_race";

/// Whether argv[0] names the kubectl plugin (a symlink or copy on PATH).
pub fn invoked_as_plugin(argv0: &std::ffi::OsStr) -> bool {
    std::path::Path::new(argv0)
        .file_name()
        .is_some_and(|n| n == KUBECTL_PLUGIN)
}

/// Parses the command line. Invoked as `kubectl-sidecar_race`, the binary is
/// `kubectl sidecar-race` and offers `report` and `lint` (`trace` and `run` belong to
/// the node agent).
pub fn parse_args(args: Vec<std::ffi::OsString>) -> Result<Cli, clap::Error> {
    let plugin = args.first().is_some_and(|a| invoked_as_plugin(a));
    let mut cmd = Cli::command();
    if plugin {
        cmd = cmd
            .name("kubectl sidecar-race")
            .bin_name("kubectl sidecar-race")
            .mut_subcommand("trace", |s| s.hide(true))
            .mut_subcommand("run", |s| s.hide(true));
    }
    let matches = cmd.clone().try_get_matches_from(args)?;
    let cli = Cli::from_arg_matches(&matches)?;
    if plugin && matches!(cli.command, Command::Trace(_) | Command::Run(_)) {
        return Err(cmd.error(
            clap::error::ErrorKind::InvalidSubcommand,
            "as a kubectl plugin, sidecar-race runs `report` and `lint`; `trace` and `run` belong to the node agent (sidecar-race-agent)",
        ));
    }
    Ok(cli)
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Stream every kernel event as one JSON object per line on stdout.
    Trace(TraceArgs),
    /// Run the node daemon: watch the kernel, serve /healthz and /readyz.
    Run(RunArgs),
    /// Rank workloads by evidence of sidecar races (from Prometheus or the agents),
    /// with the fix for each. Needs no root.
    Report(ReportArgs),
    /// Find race-prone pod templates in manifests (files, directories, `-` for
    /// stdin) and write the native-sidecar migration (`--fix`). Needs no cluster.
    Lint(LintArgs),
}

#[derive(Debug, Args)]
pub struct KernelArgs {
    /// tracefs mount point (default: found in /proc/self/mountinfo, mounted at
    /// /sys/kernel/tracing when missing).
    #[arg(long, env = "SIDECAR_RACE_TRACEFS")]
    pub tracefs: Option<PathBuf>,
    /// cgroup v2 mount point (default: found in /proc/self/mountinfo).
    #[arg(long, env = "SIDECAR_RACE_CGROUP_ROOT")]
    pub cgroup_root: Option<PathBuf>,
    /// Size of the kernel→agent ring buffer in bytes: a power of two, a multiple of
    /// the page size.
    #[arg(long, env = "SIDECAR_RACE_RING_BUFFER_BYTES", default_value_t = 1 << 20)]
    pub ring_buffer_bytes: u32,
    /// Decoded events buffered between the reader and the pipeline; beyond this they
    /// are dropped and counted.
    #[arg(long, env = "SIDECAR_RACE_CHANNEL_CAPACITY", default_value_t = 65_536)]
    pub channel_capacity: usize,
    /// Refusal records one container (cgroup) may send at once; beyond its budget the
    /// kernel counts its refusals instead of sending them. 0: no budget.
    #[arg(long, env = "SIDECAR_RACE_REFUSAL_BURST", default_value_t = sidecar_race_ebpf::layout::REFUSAL_BURST)]
    pub refusal_burst: u32,
    /// Refusal records per second one container may send once its burst is spent.
    #[arg(long, env = "SIDECAR_RACE_REFUSAL_REFILL_PER_SECOND", default_value_t = sidecar_race_ebpf::layout::REFUSAL_REFILL_PER_SECOND, value_parser = clap::value_parser!(u32).range(1..))]
    pub refusal_refill_per_second: u32,
    /// Seconds a removed cgroup or deleted pod stays resolvable (late and drain-time
    /// events still attribute).
    #[arg(long, env = "SIDECAR_RACE_GRACE_SECONDS", default_value_t = 600)]
    pub grace_seconds: u64,
    /// Hook TCP state changes with the BTF tracepoint where the kernel has BTF (cheaper
    /// per state change); `--tp-btf=false` keeps the tracefs tracepoint.
    #[arg(
        long,
        env = "SIDECAR_RACE_TP_BTF",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub tp_btf: bool,
    #[command(flatten)]
    pub pods: PodSourceArgs,
}

#[derive(Debug, Args)]
pub struct PodSourceArgs {
    /// Pod metadata source: api, kubelet, file:PATH or none (default: api in a
    /// cluster, none elsewhere).
    #[arg(long, env = "SIDECAR_RACE_PODS_FROM")]
    pub pods_from: Option<PodSourceSpec>,
    /// This node's name (downward API `spec.nodeName`); the api source watches its pods.
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// This node's IP (downward API `status.hostIP`); the kubelet source polls it.
    #[arg(long, env = "NODE_IP")]
    pub node_ip: Option<String>,
    #[arg(long, env = "SIDECAR_RACE_KUBELET_PORT", default_value_t = 10250)]
    pub kubelet_port: u16,
    /// CA bundle for the kubelet's serving certificate (default: the service account's CA).
    #[arg(long, env = "SIDECAR_RACE_KUBELET_CA")]
    pub kubelet_ca: Option<PathBuf>,
    /// Skip verifying the kubelet's certificate (only when asked: self-signed kubelets).
    #[arg(long, env = "SIDECAR_RACE_KUBELET_INSECURE")]
    pub kubelet_insecure: bool,
    /// Bearer token for the kubelet (default: the service-account token), re-read as it rotates.
    #[arg(long, env = "SIDECAR_RACE_KUBELET_TOKEN_FILE")]
    pub kubelet_token_file: Option<PathBuf>,
    /// Seconds between polls of the kubelet, and between checks of a pods file.
    #[arg(long, env = "SIDECAR_RACE_PODS_POLL_SECONDS", default_value_t = 5.0, value_parser = parse_poll_seconds)]
    pub pods_poll_seconds: f64,
    /// Container names that are classic sidecars in every pod (site-wide, besides the
    /// built-in list and the `sidecar-race.io/sidecars` annotation), comma-separated.
    #[arg(long, env = "SIDECAR_RACE_SIDECAR_NAMES", value_delimiter = ',')]
    pub sidecar_names: Vec<String>,
}

impl PodSourceArgs {
    pub fn spec(&self) -> PodSourceSpec {
        self.pods_from
            .clone()
            .unwrap_or_else(PodSourceSpec::default_for_environment)
    }

    pub fn options(&self) -> SourceOptions {
        SourceOptions {
            node_name: self.node_name.clone(),
            node_ip: self.node_ip.clone(),
            kubelet_port: self.kubelet_port,
            kubelet_ca: self.kubelet_ca.clone(),
            kubelet_insecure: self.kubelet_insecure,
            token_file: self.kubelet_token_file.clone(),
            poll_interval: Duration::from_secs_f64(self.pods_poll_seconds.max(0.1)),
            refresh: Default::default(),
        }
    }
}

impl KernelArgs {
    pub fn options(&self) -> AgentOptions {
        AgentOptions {
            tracefs: self.tracefs.clone(),
            cgroup_root: self.cgroup_root.clone(),
            probes: ProbeOptions {
                ring_buffer_bytes: self.ring_buffer_bytes,
                refusal_budget: sidecar_race_ebpf::layout::RefusalBudget::new(
                    self.refusal_burst,
                    self.refusal_refill_per_second,
                ),
                set_state_btf: self.tp_btf,
                ..ProbeOptions::default()
            },
            channel_capacity: self.channel_capacity.max(1),
            grace: Duration::from_secs(self.grace_seconds),
            pods_from: self.pods.spec(),
            source: self.pods.options(),
            sidecar_names: clean_names(&self.pods.sidecar_names),
        }
    }
}

#[derive(Debug, Args)]
pub struct TraceArgs {
    /// Comma-separated kinds to print: refused, listen, listen_closed,
    /// cgroup_created, cgroup_removed (default: all).
    #[arg(long, env = "SIDECAR_RACE_KINDS", value_delimiter = ',', value_parser = parse_kind)]
    pub kinds: Vec<Kind>,
    /// Milliseconds an event of a container the pod source has not named yet waits
    /// for its name before it is printed without.
    #[arg(long, env = "SIDECAR_RACE_ATTRIBUTION_WAIT_MS", default_value_t = 2000)]
    pub attribution_wait_ms: u64,
    /// Only events of pods in these namespaces (comma-separated).
    #[arg(long, short = 'n', value_delimiter = ',')]
    pub namespace: Vec<String>,
    /// Only events of these pods (names, comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub pod: Vec<String>,
    /// Only events of these containers (names, comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub container: Vec<String>,
    /// Only socket events on these ports (a refusal's dialed or redirected port, a
    /// listener's port), comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub port: Vec<u16>,
    /// Output: `json` lines or an aligned `table` with local times (default: table on
    /// a terminal, JSON lines otherwise).
    #[arg(long, env = "SIDECAR_RACE_TRACE_FORMAT", value_enum)]
    pub format: Option<crate::trace_view::TraceFormat>,
    #[command(flatten)]
    pub kernel: KernelArgs,
}

impl TraceArgs {
    pub fn filter(&self) -> crate::trace_view::TraceFilter {
        crate::trace_view::TraceFilter {
            namespaces: self.namespace.clone(),
            pods: self.pod.clone(),
            containers: self.container.clone(),
            ports: self.port.clone(),
        }
    }

    pub fn kind_set(&self) -> BTreeSet<Kind> {
        if self.kinds.is_empty() {
            Kind::ALL.into_iter().collect()
        } else {
            self.kinds.iter().copied().collect()
        }
    }
}

impl RunArgs {
    pub fn detector(&self) -> DetectorConfig {
        DetectorConfig {
            unresolved_after_ns: secs_ns(self.unresolved_after_seconds),
            drain_grace_ns: secs_ns(self.drain_grace_seconds),
            startup_bound_ns: secs_ns(self.startup_bound_seconds),
            pod_ip_wait_ns: secs_ns(self.metadata_wait_seconds),
            stuck_job_after_ns: secs_ns(self.stuck_job_after_seconds),
            history: self.incident_history.max(1),
            history_per_pod: self.incident_history_per_pod.max(1),
            ..DetectorConfig::default()
        }
    }
}

fn secs_ns(s: f64) -> u64 {
    (s.max(0.0) * 1e9) as u64
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Address for /healthz, /readyz, /metrics and /api/v1/incidents.
    #[arg(long, env = "SIDECAR_RACE_LISTEN", default_value = "0.0.0.0:9965")]
    pub listen: SocketAddr,
    /// Serve /api/v1/incidents only on this address (e.g. 127.0.0.1:9966, reached
    /// with `kubectl port-forward`), or `off`; default: on --listen with the others.
    #[arg(long, env = "SIDECAR_RACE_API_LISTEN", value_name = "ADDR|off")]
    pub api_listen: Option<crate::http::ApiListen>,
    /// Seconds between log lines with kernel event counts.
    #[arg(
        long,
        env = "SIDECAR_RACE_STATS_INTERVAL_SECONDS",
        default_value_t = 60
    )]
    pub stats_interval_seconds: u64,
    /// Incidents kept for /api/v1/incidents (evicted fairly per pod, see the per-pod cap).
    #[arg(long, env = "SIDECAR_RACE_INCIDENT_HISTORY", default_value_t = 10_000)]
    pub incident_history: usize,
    /// Incidents one pod may hold in the history; beyond the total, the pod holding
    /// the most gives up its oldest final incident first.
    #[arg(
        long,
        env = "SIDECAR_RACE_INCIDENT_HISTORY_PER_POD",
        default_value_t = 1_000
    )]
    pub incident_history_per_pod: usize,
    /// Seconds without a listener after which refusals are `unresolved`.
    #[arg(
        long,
        env = "SIDECAR_RACE_UNRESOLVED_AFTER_SECONDS",
        default_value_t = 120.0, value_parser = parse_seconds
    )]
    pub unresolved_after_seconds: f64,
    /// Without pod metadata, containers torn down within this many seconds after the
    /// listener went away make refusals a drain (Kubernetes' default grace period).
    #[arg(long, env = "SIDECAR_RACE_DRAIN_GRACE_SECONDS", default_value_t = 30.0, value_parser = parse_seconds)]
    pub drain_grace_seconds: f64,
    /// Refusals before a port's listener are a startup race only when the client
    /// container (and the serving one, when known) started at most this many seconds
    /// before the first refusal.
    #[arg(
        long,
        env = "SIDECAR_RACE_STARTUP_BOUND_SECONDS",
        default_value_t = 120.0, value_parser = parse_seconds
    )]
    pub startup_bound_seconds: f64,
    /// Seconds the final accounting of an incident (metrics, Event, log line) waits
    /// for the pod source to name its pod and container, and a refusal to a pod IP
    /// waits for the pod's IPs.
    #[arg(
        long,
        env = "SIDECAR_RACE_METADATA_WAIT_SECONDS",
        default_value_t = 10.0, value_parser = parse_seconds
    )]
    pub metadata_wait_seconds: f64,
    /// A Job pod whose app containers all finished this many seconds ago while a
    /// classic sidecar still runs is reported stuck.
    #[arg(
        long,
        env = "SIDECAR_RACE_STUCK_JOB_AFTER_SECONDS",
        default_value_t = 60.0, value_parser = parse_seconds
    )]
    pub stuck_job_after_seconds: f64,
    /// Post Kubernetes Events (events.k8s.io/v1) on pods with races; `--events=false`
    /// turns them off.
    #[arg(
        long,
        env = "SIDECAR_RACE_EVENTS",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub events: bool,
    /// Events the node's agent may post per minute (a burst of as many is allowed).
    #[arg(long, env = "SIDECAR_RACE_EVENTS_PER_MINUTE", default_value_t = 30)]
    pub events_per_minute: u32,
    /// Add a `pod` label to the workload metrics (more series: one per pod).
    #[arg(long, env = "SIDECAR_RACE_METRICS_POD_LABEL")]
    pub metrics_pod_label: bool,
    /// Series kept per metric family with workload, container, sidecar or port
    /// labels; samples beyond fold into one `overflow` series.
    #[arg(
        long,
        env = "SIDECAR_RACE_MAX_SERIES_PER_METRIC",
        default_value_t = crate::metrics::DEFAULT_MAX_SERIES
    )]
    pub max_series_per_metric: usize,
    /// Milliseconds kernel facts are held to be put back in time order.
    #[arg(long, env = "SIDECAR_RACE_REORDER_WINDOW_MS", default_value_t = 200)]
    pub reorder_window_ms: u64,
    #[command(flatten)]
    pub kernel: KernelArgs,
}

/// Where `report` reads evidence: Prometheus over a range, or agents' incidents.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("evidence").required(true).args(["prometheus", "agent", "agents_via_api"])))]
pub struct ReportArgs {
    /// Prometheus base URL (its HTTP API below it), e.g. http://prometheus:9090.
    #[arg(long, env = "SIDECAR_RACE_PROMETHEUS", value_name = "URL")]
    pub prometheus: Option<String>,
    /// Range to count over, in Prometheus duration syntax (with --prometheus).
    #[arg(long, env = "SIDECAR_RACE_RANGE", default_value = "7d")]
    pub range: String,
    /// An agent's base URL, e.g. http://10.0.0.5:9965; repeat the flag (env:
    /// comma-separated) for several agents.
    #[arg(
        long,
        env = "SIDECAR_RACE_AGENT",
        value_name = "URL",
        value_delimiter = ','
    )]
    pub agent: Vec<String>,
    /// Output format.
    #[arg(long, env = "SIDECAR_RACE_FORMAT", value_enum, default_value_t = crate::report::render::Format::Table)]
    pub format: crate::report::render::Format,
    /// Show only the N highest-ranked workloads (default: all).
    #[arg(long, env = "SIDECAR_RACE_TOP", value_name = "N")]
    pub top: Option<usize>,
    /// Read every agent's incidents through the API server's pod proxy, with the
    /// kubeconfig (needs `pods` list and `pods/proxy` get in --agent-namespace).
    #[arg(long, env = "SIDECAR_RACE_AGENTS_VIA_API")]
    pub agents_via_api: bool,
    /// The agents' namespace (with --agents-via-api).
    #[arg(
        long,
        env = "SIDECAR_RACE_AGENT_NAMESPACE",
        default_value = "sidecar-race"
    )]
    pub agent_namespace: String,
    /// The agents' HTTP port (with --agents-via-api).
    #[arg(long, env = "SIDECAR_RACE_AGENT_PORT", default_value_t = 9965)]
    pub agent_port: u16,
    /// Join lint findings of the live cluster's workloads (the kubeconfig's; read-only
    /// lists), as --manifests does for files.
    #[arg(long, conflicts_with = "manifests")]
    pub cluster: bool,
    /// Manifests (files, directories, `-` for stdin) to join with the evidence: the
    /// workloads that have not raced are ranked after those that did, by lint's risk.
    #[arg(
        long,
        env = "SIDECAR_RACE_MANIFESTS",
        value_name = "PATH",
        value_delimiter = ','
    )]
    pub manifests: Vec<PathBuf>,
    /// With --manifests: print each listed workload's kustomize patch (its
    /// startupProbe on the port the evidence shows clients dial).
    #[arg(long, env = "SIDECAR_RACE_WITH_PATCHES")]
    pub with_patches: bool,
    /// Container names that are classic sidecars in every pod, comma-separated (for
    /// the manifests).
    #[arg(long, env = "SIDECAR_RACE_SIDECAR_NAMES", value_delimiter = ',')]
    pub sidecar_names: Vec<String>,
}

/// What `lint --fix` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FixMode {
    /// The fixed manifests on stdout.
    Stdout,
    /// Rewrite the manifest files.
    InPlace,
    /// A kustomization `patches:` fragment (JSON patches with their targets).
    Patch,
}

/// The lowest severity that makes `lint` exit with status 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FailOn {
    Info,
    Warning,
    Error,
    /// Never fail on findings (unreadable input still exits 2).
    None,
}

impl FailOn {
    pub fn severity(self) -> Option<crate::lint::Severity> {
        use crate::lint::Severity;
        match self {
            FailOn::Info => Some(Severity::Info),
            FailOn::Warning => Some(Severity::Warning),
            FailOn::Error => Some(Severity::Error),
            FailOn::None => None,
        }
    }
}

#[derive(Debug, Args)]
pub struct LintArgs {
    /// Manifest files or directories (walked for .yaml, .yml, .json); `-` reads stdin.
    #[arg(
        value_name = "PATH",
        required_unless_present = "cluster",
        conflicts_with = "cluster"
    )]
    pub paths: Vec<PathBuf>,
    /// Lint the live cluster's workloads instead (the kubeconfig's; read-only lists).
    /// Its version is the default for --kube-version.
    #[arg(long)]
    pub cluster: bool,
    /// With --cluster: only this namespace (default: all).
    #[arg(long, short = 'n', requires = "cluster")]
    pub namespace: Option<String>,
    /// Output format: a table, JSON, or GitHub Actions annotations.
    #[arg(long, env = "SIDECAR_RACE_LINT_FORMAT", value_enum, default_value_t = crate::lint::render::Format::Table)]
    pub format: crate::lint::render::Format,
    /// Exit with status 1 when a finding is at least this severe.
    #[arg(long, env = "SIDECAR_RACE_FAIL_ON", value_enum, default_value_t = FailOn::Error)]
    pub fail_on: FailOn,
    /// The target cluster's Kubernetes version (e.g. 1.28): native sidecars need 1.29+.
    #[arg(long, env = "SIDECAR_RACE_KUBE_VERSION", value_name = "X.Y")]
    pub kube_version: Option<crate::lint::KubeVersion>,
    /// Runtime evidence: the port clients dial on sidecar NAME, for its startupProbe
    /// (repeatable, e.g. `--probe-port cloud-sql-proxy=5432`).
    #[arg(long, value_name = "NAME=PORT", value_parser = parse_probe_port)]
    pub probe_port: Vec<(String, u16)>,
    /// Container names that are classic sidecars in every pod, comma-separated.
    #[arg(long, env = "SIDECAR_RACE_SIDECAR_NAMES", value_delimiter = ',')]
    pub sidecar_names: Vec<String>,
    /// Write the migration instead of findings: `--fix` prints the fixed manifests,
    /// `--fix=in-place` rewrites the files, `--fix=patch` prints kustomize patches.
    #[arg(long, value_enum, value_name = "MODE", num_args = 0..=1, require_equals = true, default_missing_value = "stdout")]
    pub fix: Option<FixMode>,
}

impl LintArgs {
    pub fn options(&self) -> crate::lint::Options {
        crate::lint::Options {
            kube_version: self.kube_version,
            probe_ports: self.probe_port.iter().cloned().collect(),
            site_sidecars: clean_names(&self.sidecar_names),
        }
    }
}

/// `--sidecar-names` entries trimmed, empty ones dropped.
pub fn clean_names(names: &[String]) -> Vec<String> {
    names
        .iter()
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .collect()
}

fn parse_probe_port(s: &str) -> Result<(String, u16), String> {
    let (name, port) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: expected NAME=PORT"))?;
    let port = port
        .trim()
        .parse()
        .map_err(|_| format!("`{s}`: {port} is not a port"))?;
    Ok((name.trim().to_string(), port))
}

/// The most seconds a duration flag takes: a day is beyond any sensible setting, and
/// keeps every derived duration far from overflowing.
const MAX_SECONDS: f64 = 86_400.0;

/// A duration in seconds: a finite number from 0 to `MAX_SECONDS`.
fn parse_seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !v.is_finite() || !(0.0..=MAX_SECONDS).contains(&v) {
        return Err(format!(
            "`{s}` seconds: expected a finite number from 0 to {MAX_SECONDS}"
        ));
    }
    Ok(v)
}

/// A polling interval: at least 0.1 s (the pod source would spin below).
fn parse_poll_seconds(s: &str) -> Result<f64, String> {
    let v = parse_seconds(s)?;
    if v < 0.1 {
        return Err(format!("`{s}` seconds: a poll interval is at least 0.1"));
    }
    Ok(v)
}

fn parse_kind(s: &str) -> Result<Kind, String> {
    Kind::from_name(s.trim()).ok_or_else(|| {
        let names: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
        format!("unknown kind `{s}`; expected one of {}", names.join(", "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_and_default_to_all() {
        let cli = Cli::try_parse_from(["a", "trace", "--kinds", "refused,listen"]).unwrap();
        let Command::Trace(t) = cli.command else {
            panic!()
        };
        assert_eq!(
            t.kind_set(),
            [Kind::Refused, Kind::Listen].into_iter().collect()
        );
        let Command::Trace(t) = Cli::try_parse_from(["a", "trace"]).unwrap().command else {
            panic!()
        };
        assert_eq!(t.kind_set().len(), 5);
        let err = Cli::try_parse_from(["a", "trace", "--kinds", "bogus"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown kind `bogus`"), "{err}");
    }

    #[test]
    fn kubectl_plugin_runs_report_and_lint_only() {
        let args = |a: &[&str]| a.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        let cli = parse_args(args(&[
            "/usr/local/bin/kubectl-sidecar_race",
            "lint",
            "m.yaml",
        ]))
        .unwrap();
        assert!(matches!(cli.command, Command::Lint(_)));
        let err = parse_args(args(&["kubectl-sidecar_race", "run"])).unwrap_err();
        assert!(err.to_string().contains("as a kubectl plugin"), "{err}");
        let help = parse_args(args(&["kubectl-sidecar_race", "--help"]))
            .unwrap_err()
            .to_string();
        assert!(help.contains("kubectl sidecar-race"), "{help}");
        assert!(!help.contains("\n  trace"), "{help}");
        assert!(parse_args(args(&["sidecar-race-agent", "run"])).is_ok());
    }

    #[test]
    fn durations_must_be_finite_and_in_range() {
        for bad in ["inf", "NaN", "-1", "1e300", "five"] {
            let flag = format!("--pods-poll-seconds={bad}");
            let err = Cli::try_parse_from(["a", "run", &flag])
                .unwrap_err()
                .to_string();
            assert!(err.contains(&format!("`{bad}`")), "{bad}: {err}");
            assert!(err.contains("--pods-poll-seconds"), "{bad}: {err}");
            let flag = format!("--metadata-wait-seconds={bad}");
            let err = Cli::try_parse_from(["a", "run", &flag])
                .unwrap_err()
                .to_string();
            assert!(err.contains(&format!("`{bad}`")), "{bad}: {err}");
        }
        let err = Cli::try_parse_from(["a", "run", "--pods-poll-seconds", "0"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("a poll interval is at least 0.1"), "{err}");
        let Command::Run(r) = Cli::try_parse_from(["a", "run", "--pods-poll-seconds", "0.5"])
            .unwrap()
            .command
        else {
            panic!()
        };
        assert_eq!(
            r.kernel.pods.options().poll_interval,
            Duration::from_millis(500)
        );
    }

    #[test]
    fn run_defaults() {
        let Command::Run(r) = Cli::try_parse_from(["a", "run"]).unwrap().command else {
            panic!()
        };
        assert_eq!(r.listen.to_string(), "0.0.0.0:9965");
        assert_eq!(r.kernel.ring_buffer_bytes, 1 << 20);
        assert_eq!(
            r.kernel.options().probes.refusal_budget,
            sidecar_race_ebpf::layout::RefusalBudget::new(200, 100)
        );
        assert!(Cli::try_parse_from(["a", "run", "--refusal-refill-per-second", "0"]).is_err());
        let Command::Run(r) = Cli::try_parse_from([
            "a",
            "run",
            "--pods-from",
            "file:/p.json",
            "--node-name",
            "n1",
        ])
        .unwrap()
        .command
        else {
            panic!()
        };
        assert_eq!(r.kernel.pods.spec(), PodSourceSpec::File("/p.json".into()));
        assert_eq!(r.kernel.pods.options().node_name.as_deref(), Some("n1"));
        assert!(Cli::try_parse_from(["a", "run", "--pods-from", "etcd"]).is_err());
        let Command::Run(r) = Cli::try_parse_from(["a", "run", "--events=false"])
            .unwrap()
            .command
        else {
            panic!()
        };
        assert!(!r.events);
        let Command::Run(r) = Cli::try_parse_from(["a", "run", "--events"])
            .unwrap()
            .command
        else {
            panic!()
        };
        assert!(r.events);
        let Command::Run(r) = Cli::try_parse_from(["a", "run"]).unwrap().command else {
            panic!()
        };
        assert!(r.events);
    }
}
