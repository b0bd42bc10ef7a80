//! `trace`: every kernel event as it happens, filtered.

use std::collections::BTreeSet;

use clap::Args;

use super::kernel::KernelArgs;
use crate::ingest::events::Kind;

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
    pub format: Option<crate::trace::view::TraceFormat>,
    #[command(flatten)]
    pub kernel: KernelArgs,
}

impl TraceArgs {
    pub fn filter(&self) -> crate::trace::view::TraceFilter {
        crate::trace::view::TraceFilter {
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

fn parse_kind(s: &str) -> Result<Kind, String> {
    Kind::from_name(s.trim()).ok_or_else(|| {
        let names: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
        format!("unknown kind `{s}`; expected one of {}", names.join(", "))
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::command::{Cli, Command};

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
        assert_eq!(t.kind_set().len(), Kind::ALL.len());
        let err = Cli::try_parse_from(["a", "trace", "--kinds", "bogus"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown kind `bogus`"), "{err}");
    }
}
