//! `sidecar-race-agent run`: the long-running daemon.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering::Relaxed},
    },
    time::Duration,
};

use anyhow::Context;
use tokio::sync::Notify;

use crate::{
    agent::{self, AgentOptions},
    events::Kind,
    http::{self, HttpState},
    shutdown,
};

pub struct RunOptions {
    pub agent: AgentOptions,
    pub listen: SocketAddr,
    pub stats_interval: Duration,
}

pub async fn run(opts: RunOptions) -> anyhow::Result<()> {
    let mut agent = agent::start(&opts.agent)?;
    let ready = Arc::new(AtomicBool::new(false));
    let stop_http = Arc::new(Notify::new());
    let stop = stop_http.clone();
    let server = http::serve(
        opts.listen,
        HttpState {
            ready: ready.clone(),
            stream: agent.stream.stats.clone(),
        },
        async move { stop.notified().await },
    )
    .await
    .with_context(|| format!("cannot listen on {}", opts.listen))?;
    ready.store(true, Relaxed);

    let mut stats = tokio::time::interval(opts.stats_interval);
    stats.tick().await;
    let signal = shutdown::signal();
    tokio::pin!(signal);
    let mut stopping = false;
    loop {
        tokio::select! {
            ev = agent.stream.events.recv() => {
                let Some(ev) = ev else { break };
                agent.observe(&ev);
            }
            Some(update) = agent.pod_updates.recv() => agent.apply(update),
            _ = stats.tick() => log_counts(&agent),
            _ = &mut signal, if !stopping => {
                tracing::info!("stopping");
                stopping = true;
                ready.store(false, Relaxed);
                agent.stream.stop();
            }
        }
    }
    log_counts(&agent);
    stop_http.notify_one();
    server.await??;
    Ok(())
}

fn log_counts(agent: &agent::Agent) {
    match agent.probes.counts() {
        Ok(counts) => {
            let stats = &agent.stream.stats;
            let seen: BTreeMap<&str, u64> =
                counts.iter().map(|(k, c)| (k.name(), c.seen)).collect();
            let lost: u64 = counts.values().map(|c| c.lost).sum();
            let delivered: u64 = Kind::ALL.iter().map(|k| stats.delivered(*k)).sum();
            tracing::info!(
                ?seen,
                lost_in_kernel = lost,
                delivered,
                dropped_in_agent = stats.dropped_in_agent.load(Relaxed),
                cgroups = agent.inventory.cgroups.len(),
                pods = agent.inventory.pods.len(),
                unattributed = agent.inventory.unattributed_events(),
                pod_source_errors = agent.source_stats.errors(),
                "kernel event counts"
            );
        }
        Err(e) => tracing::warn!("cannot read kernel counters: {e}"),
    }
}
