//! `sidecar-race-agent report`: workloads ranked by evidence of sidecar races, with
//! the fix for each. Needs neither root nor eBPF: it reads Prometheus or the agents.

use std::io::Write;

use anyhow::Context;

use crate::{
    cli::ReportArgs,
    lint,
    report::{
        self, Input,
        cluster_label::ClusterLabel,
        html,
        input::collect_keeping_incidents,
        plan,
        render::{self, Format},
    },
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

/// The agents of `--agent` or `--agents-via-api`, when given.
fn agents_input(args: &ReportArgs) -> anyhow::Result<Option<Input>> {
    Ok(if args.agents_via_api {
        Some(Input::AgentsViaApi {
            namespace: args.agent_namespace.clone(),
            port: args.agent_port,
            token: agent_token(args)?,
        })
    } else if !args.agent.is_empty() {
        Some(Input::Agents {
            token: agent_token(args)?,
            urls: args.agent.clone(),
        })
    } else {
        None
    })
}

pub async fn run(args: ReportArgs) -> anyhow::Result<()> {
    if args.with_patches && args.manifests.is_empty() && !args.cluster {
        anyhow::bail!("--with-patches needs --manifests or --cluster");
    }
    let agents = agents_input(&args)?;
    // With --prometheus, the agents' incidents only draw the html page's timelines.
    let (input, drawn_from) = match (&args.prometheus, agents) {
        // Both sources come only with --format html (`cli::parse_args` refuses the rest).
        (Some(url), agents) => {
            let prometheus = Input::Prometheus {
                url: url.clone(),
                range: args.range.clone(),
                cluster_label: ClusterLabel::from_flag(args.cluster_label.clone()),
            };
            (prometheus, agents)
        }
        (None, Some(agents)) => (agents, None),
        (None, None) => anyhow::bail!("give --prometheus, --agent or --agents-via-api"),
    };
    let collected = collect_keeping_incidents(&input).await?;
    let incidents = match &drawn_from {
        Some(agents) => collect_keeping_incidents(agents).await?.incidents,
        None => collected.incidents,
    };
    let ranked = report::build_verified(collected.fleet, args.top, args.min_starts_since_change);
    let text = if args.manifests.is_empty() && !args.cluster {
        match args.format {
            Format::Html => html::page(&html::Page {
                incidents: &incidents,
                ..html::Page::of(&ranked)
            }),
            format => render::render(&ranked, format),
        }
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
        let plan = plan::plan(ranked, &workloads, &opts, args.with_patches);
        match args.format {
            Format::Html => html::page(&html::Page {
                report: &plan.report,
                incidents: &incidents,
                patches: plan.patches.as_deref(),
            }),
            format => plan::render(&plan, format),
        }
    };
    let mut out = std::io::stdout().lock();
    // A closed pipe (`| head`) is the reader's choice, not a failure.
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}
