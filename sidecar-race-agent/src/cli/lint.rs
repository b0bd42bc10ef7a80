//! `lint`: manifests (or the live cluster) in, findings or the migration out.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::values::clean_names;

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
    /// Meshes assumed to inject native sidecars by default (`istio,linkerd`); without
    /// it (and without --cluster, which reads their configuration) injection is
    /// assumed classic.
    #[arg(long, value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(crate::lint::injection::assumable_meshes()))]
    pub assume_native_mesh: Vec<String>,
}

impl LintArgs {
    pub fn options(&self) -> crate::lint::Options {
        crate::lint::Options {
            kube_version: self.kube_version,
            probe_ports: self.probe_port.iter().cloned().collect(),
            site_sidecars: clean_names(&self.sidecar_names),
            ..Default::default()
        }
    }
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
