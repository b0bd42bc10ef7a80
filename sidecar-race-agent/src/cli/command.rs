//! The top-level command line: the global flags, the subcommands, and parsing (as
//! the node agent, or as the `kubectl sidecar-race` plugin).

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use super::{
    lint::LintArgs, report::ReportArgs, run::RunArgs, state::PlaceArgs, timeline::TimelineArgs,
    trace::TraceArgs,
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
/// `kubectl sidecar-race` and offers `report`, `lint` and `timeline` (`trace`, `run` and `unpin` belong to
/// the node agent).
pub fn parse_args(args: Vec<std::ffi::OsString>) -> Result<Cli, clap::Error> {
    let plugin = args.first().is_some_and(|a| invoked_as_plugin(a));
    let mut cmd = Cli::command();
    if plugin {
        cmd = cmd
            .name("kubectl sidecar-race")
            .bin_name("kubectl sidecar-race")
            .mut_subcommand("trace", |s| s.hide(true))
            .mut_subcommand("run", |s| s.hide(true))
            .mut_subcommand("unpin", |s| s.hide(true));
    }
    let matches = cmd.clone().try_get_matches_from(args)?;
    let cli = Cli::from_arg_matches(&matches)?;
    if plugin
        && matches!(
            cli.command,
            Command::Trace(_) | Command::Run(_) | Command::Unpin(_)
        )
    {
        return Err(cmd.error(
            clap::error::ErrorKind::InvalidSubcommand,
            "as a kubectl plugin, sidecar-race runs `report`, `lint` and `timeline`; `trace`, `run` and `unpin` belong to the node agent (sidecar-race-agent)",
        ));
    }
    // Prometheus ranks, the agents' incidents are drawn: both sources only for the page.
    if let Command::Report(r) = &cli.command
        && r.prometheus.is_some()
        && (!r.agent.is_empty() || r.agents_via_api)
        && r.format != crate::report::render::Format::Html
    {
        return Err(cmd.error(
            clap::error::ErrorKind::ArgumentConflict,
            "--agent and --agents-via-api go with --prometheus only for --format html \
             (Prometheus ranks, the agents' incidents are drawn); give one source",
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
    /// Print a pod's incidents and their timelines, read from the agent on its node
    /// through the API server (the kubeconfig's). Needs no root.
    Timeline(TimelineArgs),
    /// Remove what agents pinned on this node (their programs detach): after an
    /// uninstall. Waits for a running agent's lock.
    Unpin(PlaceArgs),
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let cli = parse_args(args(&[
            "kubectl-sidecar_race",
            "timeline",
            "web-0",
            "-n",
            "shop",
        ]))
        .unwrap();
        assert!(matches!(cli.command, Command::Timeline(ref t) if t.pod == "web-0"));
        let err = parse_args(args(&["kubectl-sidecar_race", "run"])).unwrap_err();
        assert!(err.to_string().contains("as a kubectl plugin"), "{err}");
        let help = parse_args(args(&["kubectl-sidecar_race", "--help"]))
            .unwrap_err()
            .to_string();
        assert!(help.contains("kubectl sidecar-race"), "{help}");
        assert!(!help.contains("\n  trace"), "{help}");
        assert!(parse_args(args(&["sidecar-race-agent", "run"])).is_ok());
    }
}
