//! `sidecar-race-agent report`: workloads ranked by evidence of sidecar races, with
//! the fix for each. Needs neither root nor eBPF: it reads Prometheus or the agents.

use std::io::Write;

use crate::{
    cli::ReportArgs,
    report::{self, Input, render},
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
    let text = render::render(&report::build(fleet, args.top), args.format);
    let mut out = std::io::stdout().lock();
    // A closed pipe (`| head`) is the reader's choice, not a failure.
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}
