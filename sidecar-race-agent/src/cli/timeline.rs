//! `timeline POD`: which pod, where its node's agent runs, and how to print it.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// A pod's incidents and their timelines, from the agent on its node.
#[derive(Debug, Args)]
pub struct TimelineArgs {
    /// The pod's name.
    pub pod: String,
    /// The pod's namespace (default: the kubeconfig context's, else `default`).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// `text`: a header per incident and a line per timeline entry; `json`: the
    /// incidents as the agent's API gave them, in one document.
    #[arg(long, env = "SIDECAR_RACE_TIMELINE_FORMAT", value_enum, default_value_t = TimelineFormat::Text)]
    pub format: TimelineFormat,
    /// The agents' namespace.
    #[arg(
        long,
        env = "SIDECAR_RACE_AGENT_NAMESPACE",
        default_value = "sidecar-race"
    )]
    pub agent_namespace: String,
    /// The agents' HTTP port.
    #[arg(long, env = "SIDECAR_RACE_AGENT_PORT", default_value_t = 9965)]
    pub agent_port: u16,
    /// A file holding the token to send the agent (agents run with `--auth
    /// kubernetes`); default: a 10-minute token of the `sidecar-race-scraper`
    /// ServiceAccount.
    #[arg(long, env = "SIDECAR_RACE_AGENT_TOKEN_FILE", value_name = "PATH")]
    pub agent_token_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TimelineFormat {
    Text,
    Json,
}
