//! `sidecar-race-agent trace`: every kernel event as a JSON line on stdout.

use std::{
    collections::BTreeSet,
    io::{self, Write},
    sync::atomic::Ordering::Relaxed,
};

use serde_json::json;

use crate::{
    agent::{self, AgentOptions},
    events::{KernelEvent, Kind},
    shutdown,
    trace_record::TraceRecord,
};

pub async fn run(opts: AgentOptions, kinds: BTreeSet<Kind>) -> anyhow::Result<()> {
    let mut agent = agent::start(&opts)?;
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let signal = shutdown::signal();
    tokio::pin!(signal);
    let mut stopping = false;
    loop {
        let ev = tokio::select! {
            ev = agent.stream.events.recv() => ev,
            _ = &mut signal, if !stopping => {
                stopping = true;
                agent.stream.stop();
                continue;
            }
        };
        let Some(ev) = ev else { break };
        update_index(&mut agent.cgroups, &ev);
        if kinds.contains(&ev.kind()) {
            let path = agent.cgroups.resolve(ev.cgroup_id()).map(str::to_string);
            let line = serde_json::to_string(&TraceRecord::new(&ev, path))?;
            if writeln!(out, "{line}").is_err() {
                break; // reader of stdout went away
            }
        }
        // Flush when the burst is over, so scripts see events promptly.
        if agent.stream.events.is_empty() && out.flush().is_err() {
            break;
        }
    }
    let _ = out.flush();
    summary(&agent)?;
    Ok(())
}

/// Keeps the cgroup index current from the kernel's cgroup events.
pub fn update_index(index: &mut crate::cgroups::CgroupIndex, ev: &KernelEvent) {
    match ev {
        KernelEvent::CgroupCreated(c) => index.created(c.cgroup_id, &c.path),
        KernelEvent::CgroupRemoved(c) => {
            index.removed(c.cgroup_id, &c.path, c.ts_boot_ns);
            index.expire(c.ts_boot_ns);
        }
        _ => {}
    }
}

/// On exit, one JSON line on stderr: kernel counts (exact) next to what reached us.
fn summary(agent: &agent::Agent) -> anyhow::Result<()> {
    let counts = agent.probes.counts()?;
    let stats = &agent.stream.stats;
    let kinds: serde_json::Map<String, serde_json::Value> = counts
        .iter()
        .map(|(k, c)| {
            (
                k.name().to_string(),
                json!({"seen": c.seen, "lost": c.lost, "delivered": stats.delivered(*k)}),
            )
        })
        .collect();
    eprintln!(
        "{}",
        json!({"summary": {
            "kernel_events": kinds,
            "dropped_in_agent": stats.dropped_in_agent.load(Relaxed),
            "decode_errors": stats.decode_errors.load(Relaxed),
        }})
    );
    Ok(())
}
