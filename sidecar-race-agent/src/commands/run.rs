//! `sidecar-race-agent run`: the long-running daemon.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering::Relaxed},
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use tokio::sync::Notify;

use crate::{
    agent::{self, AgentOptions},
    clock,
    detect::{Change, DetectorConfig},
    events::Kind,
    http::{self, HttpState},
    k8s_events::{EventPublisher, notice_for},
    metrics::Metrics,
    pipeline::Pipeline,
    shutdown,
};

/// How often held facts are released and time advances in the detector.
const TICK: Duration = Duration::from_millis(100);
/// How often kernel and source counters are copied into the metrics.
const TOTALS: Duration = Duration::from_secs(1);

pub struct RunOptions {
    pub agent: AgentOptions,
    /// Post Kubernetes Events, at most this many per minute.
    pub events: Option<u32>,
    /// Add a `pod` label to workload metrics.
    pub metrics_pod_label: bool,
    pub listen: SocketAddr,
    pub stats_interval: Duration,
    pub detector: DetectorConfig,
    pub reorder_window: Duration,
}

pub async fn run(opts: RunOptions) -> anyhow::Result<()> {
    let agent::Agent {
        env,
        probes,
        mut stream,
        inventory,
        mut pod_updates,
        source_stats,
    } = agent::start(&opts.agent)?;
    let pipeline = Arc::new(Mutex::new(Pipeline::new(
        inventory,
        opts.detector,
        opts.reorder_window.as_nanos() as u64,
    )));
    let metrics = Arc::new(Mutex::new(Metrics::new(
        opts.metrics_pod_label,
        env!("CARGO_PKG_VERSION"),
        &env.kernel_release,
    )));
    let source_name = opts.agent.pods_from.name();
    let events = match opts.events {
        Some(per_minute) => start_events(&opts.agent, per_minute).await,
        None => None,
    };
    let ready = Arc::new(AtomicBool::new(false));
    let stop_http = Arc::new(Notify::new());
    let stop = stop_http.clone();
    let server = http::serve(
        opts.listen,
        HttpState {
            ready: ready.clone(),
            stream: stream.stats.clone(),
            pipeline: pipeline.clone(),
            metrics: metrics.clone(),
        },
        async move { stop.notified().await },
    )
    .await
    .with_context(|| format!("cannot listen on {}", opts.listen))?;
    ready.store(true, Relaxed);

    let mut stats = tokio::time::interval(opts.stats_interval);
    stats.tick().await;
    let mut tick = tokio::time::interval(TICK);
    let mut totals = tokio::time::interval(TOTALS);
    let signal = shutdown::signal();
    tokio::pin!(signal);
    let mut stopping = false;
    let lock = || pipeline.lock().expect("pipeline lock");
    loop {
        tokio::select! {
            ev = stream.events.recv() => {
                let Some(ev) = ev else { break };
                lock().kernel_event(&ev);
            }
            Some(update) = pod_updates.recv() => lock().pod_update(update),
            _ = tick.tick() => {
                let p = &mut *lock();
                let changes = p.tick(clock::boot_now_ns());
                log_changes(p, &changes);
                metrics.lock().expect("metrics lock").record(&changes, p, Instant::now());
                if let Some(events) = &events {
                    publish(events, p, &changes);
                }
            }
            _ = totals.tick() => {
                if let Ok(kernel) = probes.counts() {
                    let p = lock();
                    metrics.lock().expect("metrics lock").update_totals(
                        &kernel,
                        p.counts.refusals_other,
                        p.inventory.unattributed_events(),
                        source_name,
                        source_stats.errors(),
                    );
                }
            }
            _ = stats.tick() => log_counts(&probes, &stream, &lock(), &source_stats),
            _ = &mut signal, if !stopping => {
                tracing::info!("stopping");
                stopping = true;
                ready.store(false, Relaxed);
                stream.stop();
            }
        }
    }
    {
        let p = &mut *lock();
        let changes = p.flush(clock::boot_now_ns());
        log_changes(p, &changes);
        metrics
            .lock()
            .expect("metrics lock")
            .record(&changes, p, Instant::now());
    }
    log_counts(&probes, &stream, &lock(), &source_stats);
    stop_http.notify_one();
    server.await??;
    Ok(())
}

/// An Event publisher, when a Kubernetes client can be configured (in-cluster or
/// KUBECONFIG); without one, Events are off and detection goes on.
async fn start_events(opts: &AgentOptions, per_minute: u32) -> Option<EventPublisher> {
    match kube::Client::try_default().await {
        Ok(client) => {
            let node = opts
                .source
                .node_name
                .clone()
                .unwrap_or_else(|| "unknown-node".into());
            tracing::info!(per_minute, "posting Kubernetes Events on pods with races");
            Some(EventPublisher::spawn(client, node, per_minute))
        }
        Err(e) => {
            tracing::warn!("Kubernetes Events are off: no client configuration ({e})");
            None
        }
    }
}

/// Races that ended (and late refusals of ended ones) become Events on their pods.
fn publish(events: &EventPublisher, p: &Pipeline, changes: &[Change]) {
    for c in changes {
        let (Change::Resolved(id) | Change::Refused(id)) = c else {
            continue;
        };
        let Some(inc) = p.incident(*id) else { continue };
        if inc.state != crate::detect::State::Resolved || inc.awaiting_attribution {
            continue;
        }
        if let Some(notice) = notice_for(&p.view(inc)) {
            events.notify(notice);
        }
    }
}

/// One structured log line per incident opened, rephased and resolved.
fn log_changes(p: &Pipeline, changes: &[Change]) {
    for c in changes {
        let (id, what) = match c {
            Change::Opened(id) => (*id, "incident opened"),
            Change::Resolved(id) => (*id, "incident resolved"),
            Change::Rephased { id, .. } => (*id, "incident phase changed"),
            Change::Refused(_)
            | Change::Other
            | Change::Discarded { .. }
            | Change::PodStarted { .. } => continue,
        };
        let Some(inc) = p.incident(id) else { continue };
        let v = p.view(inc);
        tracing::info!(
            incident = v.id,
            phase = v.phase.as_str(),
            state = v.state.as_str(),
            pod_uid = %v.pod_uid,
            namespace = v.namespace.as_deref().unwrap_or(""),
            pod = v.pod.as_deref().unwrap_or(""),
            container = v.container.as_deref().unwrap_or(""),
            container_id = v.container_id.as_deref().unwrap_or(""),
            sidecar = v.sidecar.as_deref().unwrap_or(""),
            pattern = v.pattern.as_str(),
            port = v.port,
            destination = %v.destination,
            refused_count = v.refused_count,
            race_window_seconds = v.race_window_seconds,
            advice = %v.advice,
            "{what}"
        );
    }
}

fn log_counts(
    probes: &crate::kernel::probes::Probes,
    stream: &crate::stream::EventStream,
    p: &Pipeline,
    sources: &crate::inventory::sources::SourceStats,
) {
    match probes.counts() {
        Ok(counts) => {
            let stats = &stream.stats;
            let seen: BTreeMap<&str, u64> =
                counts.iter().map(|(k, c)| (k.name(), c.seen)).collect();
            let lost: u64 = counts.values().map(|c| c.lost).sum();
            let delivered: u64 = Kind::ALL.iter().map(|k| stats.delivered(*k)).sum();
            tracing::info!(
                ?seen,
                lost_in_kernel = lost,
                delivered,
                dropped_in_agent = stats.dropped_in_agent.load(Relaxed),
                cgroups = p.inventory.cgroups.len(),
                pods = p.inventory.pods.len(),
                incidents = p.detector.incidents().len(),
                refusals_other = p.counts.refusals_other,
                unattributed = p.inventory.unattributed_events(),
                pod_source_errors = sources.errors(),
                "kernel event counts"
            );
        }
        Err(e) => tracing::warn!("cannot read kernel counters: {e}"),
    }
}
