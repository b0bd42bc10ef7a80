//! `sidecar-race-agent timeline POD` (`kubectl sidecar-race timeline POD`): the pod's
//! incidents and their timelines, from the agent on its node through the API server.

use std::io::Write;

use anyhow::Context;

use crate::{
    cli::{TimelineArgs, TimelineFormat},
    report::{pod_timeline, timeline_text},
};

pub async fn run(args: TimelineArgs) -> anyhow::Result<()> {
    let token = match &args.agent_token_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read --agent-token-file {}", path.display()))?
                .trim()
                .to_string(),
        ),
        None => None,
    };
    let read = pod_timeline::read(&pod_timeline::Request {
        pod: args.pod,
        namespace: args.namespace,
        agent_namespace: args.agent_namespace,
        agent_port: args.agent_port,
        token,
    })
    .await?;
    let text = match args.format {
        TimelineFormat::Text => timeline_text::render(&read),
        TimelineFormat::Json => {
            serde_json::to_string_pretty(&serde_json::json!({
                "namespace": read.namespace,
                "pod": read.pod,
                "pod_uid": read.uid,
                "node": read.node,
                "agent": read.agent,
                "incidents": read.incidents,
                "truncated": read.truncated,
            }))? + "\n"
        }
    };
    let mut out = std::io::stdout().lock();
    // A closed pipe (`| head`) is the reader's choice, not a failure.
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}
