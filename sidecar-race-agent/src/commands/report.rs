//! `sidecar-race-agent report`: workloads ranked by evidence of sidecar races, with
//! the fix for each. Needs neither root nor eBPF: it reads Prometheus or the agents.

use std::io::Write;

use anyhow::Context;

use crate::{
    cli::ReportArgs,
    lint,
    report::{self, Input, cluster_label::ClusterLabel, plan, render},
};

/// The token of `--agent-token-file`, trimmed (`kubectl create token` ends it with a
/// newline).
fn agent_token(args: &ReportArgs) -> anyhow::Result<Option<String>> {
    let Some(path) = &args.agent_token_file else {
        return Ok(None);
    };
    let token = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read --agent-token-file {}", path.display()))?;
    Ok(Some(token.trim().to_string()))
}

pub async fn run(args: ReportArgs) -> anyhow::Result<()> {
    if args.with_patches && args.manifests.is_empty() && !args.cluster {
        anyhow::bail!("--with-patches needs --manifests or --cluster");
    }
    let input = match args.prometheus {
        Some(url) => Input::Prometheus {
            url,
            range: args.range,
            cluster_label: ClusterLabel::from_flag(args.cluster_label),
        },
        None if args.agents_via_api => Input::AgentsViaApi {
            namespace: args.agent_namespace.clone(),
            port: args.agent_port,
            token: agent_token(&args)?,
        },
        None => Input::Agents {
            token: agent_token(&args)?,
            urls: args.agent,
        },
    };
    let fleet = report::collect(&input).await?;
    let ranked = report::build(fleet, args.top);
    let text = if args.manifests.is_empty() && !args.cluster {
        render::render(&ranked, args.format)
    } else {
        let mut opts = lint::Options {
            site_sidecars: crate::cli::clean_names(&args.sidecar_names),
            ..lint::Options::default()
        };
        let (workloads, errors) = if args.cluster {
            let client = lint::cluster::client().await?;
            lint::cluster::settings(&client, &mut opts).await?;
            lint::cluster::workloads(&client, None, &opts.site_sidecars).await?
        } else {
            let sources = lint::input::read_sources(&args.manifests)?;
            lint::load(&sources, &opts)
        };
        if let Some(e) = errors.first() {
            anyhow::bail!("{e}");
        }
        plan::render(
            &plan::plan(ranked, &workloads, &opts, args.with_patches),
            args.format,
        )
    };
    let mut out = std::io::stdout().lock();
    // A closed pipe (`| head`) is the reader's choice, not a failure.
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}
