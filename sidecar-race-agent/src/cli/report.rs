//! `report`: where the evidence comes from, and what to join it with.

use std::path::PathBuf;

use clap::Args;

/// Where `report` reads evidence: Prometheus over a range, or agents' incidents (with
/// `--format html`, both: Prometheus ranks, the agents' incidents are drawn).
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("evidence").required(true).multiple(true).args(["prometheus", "agent", "agents_via_api"])))]
pub struct ReportArgs {
    /// Prometheus base URL (its HTTP API below it), e.g. http://prometheus:9090.
    #[arg(long, env = "SIDECAR_RACE_PROMETHEUS", value_name = "URL")]
    pub prometheus: Option<String>,
    /// Range to count over, in Prometheus duration syntax (with --prometheus).
    #[arg(long, env = "SIDECAR_RACE_RANGE", default_value = "7d")]
    pub range: String,
    /// The label that names a series' cluster on a federating or Thanos-style
    /// Prometheus (with --prometheus): one line per workload and cluster, and a
    /// fleet-wide roll-up. Series without it read as before; '' turns it off.
    /// Default: `cluster`, else `k8s_cluster_name` (OpenTelemetry's
    /// `k8s.cluster.name`), the first the agents' series carry; the report says which.
    #[arg(long, env = "SIDECAR_RACE_CLUSTER_LABEL", value_name = "NAME")]
    pub cluster_label: Option<String>,
    /// An agent's base URL, e.g. http://10.0.0.5:9965; repeat the flag (env:
    /// comma-separated) for several agents.
    #[arg(
        long,
        env = "SIDECAR_RACE_AGENT",
        value_name = "URL",
        value_delimiter = ','
    )]
    pub agent: Vec<String>,
    /// A file holding the bearer token to send the agents (--agent, --agents-via-api), for agents run
    /// with `--auth kubernetes`: e.g. `kubectl create token sidecar-race-scraper -n
    /// sidecar-race > token`.
    #[arg(long, env = "SIDECAR_RACE_AGENT_TOKEN_FILE", value_name = "PATH")]
    pub agent_token_file: Option<PathBuf>,
    /// Output format.
    #[arg(long, env = "SIDECAR_RACE_FORMAT", value_enum, default_value_t = crate::report::render::Format::Table)]
    pub format: crate::report::render::Format,
    /// Migration verification (with --prometheus): a workload is `fixed` once at
    /// least N pods started since its pod template last changed and none raced (30:
    /// 0 in 30 bounds the affected share at 10 % with 95 % confidence); fewer clean
    /// starts are `not enough starts yet`, any race since is `still racing`.
    #[arg(
        long,
        env = "SIDECAR_RACE_MIN_STARTS_SINCE_CHANGE",
        value_name = "N",
        default_value_t = crate::report::migration::DEFAULT_MIN_STARTS,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub min_starts_since_change: u64,
    /// Show only the N highest-ranked workloads (default: all).
    #[arg(long, env = "SIDECAR_RACE_TOP", value_name = "N")]
    pub top: Option<usize>,
    /// Read every agent's incidents through the API server's pod proxy, with the
    /// kubeconfig (needs `pods` list and `pods/proxy` get in --agent-namespace).
    #[arg(long, env = "SIDECAR_RACE_AGENTS_VIA_API", conflicts_with = "agent")]
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
