//! `sidecar-race-agent report`: workloads ranked by evidence of sidecar races, with
//! the fix for each. Needs neither root nor eBPF: it reads Prometheus or the agents.

use std::io::Write;

use crate::{
    cli::ReportArgs,
    lint,
    report::{self, Input, plan, render},
};

pub async fn run(args: ReportArgs) -> anyhow::Result<()> {
    let input = match args.prometheus {
        Some(url) => Input::Prometheus {
            url,
            range: args.range,
        },
        None => Input::Agents(args.agent),
    };
    let fleet = report::collect(&input).await?;
    let ranked = report::build(fleet, args.top);
    let text = if args.manifests.is_empty() {
        render::render(&ranked, args.format)
    } else {
        let opts = lint::Options {
            site_sidecars: args.sidecar_names.clone(),
            ..lint::Options::default()
        };
        let sources = lint::input::read_sources(&args.manifests)?;
        let (workloads, errors) = lint::load(&sources, &opts);
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
