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
    detect::{Change, DetectorConfig, incident::Subject},
    events::Kind,
    http::{self, HttpState},
    k8s_events::{EventPublisher, notice_for},
    log_budget::LogBudget,
    metrics::{BoundsTotals, Metrics},
    pipeline::{Pipeline, Step},
    shutdown,
};

/// How often held facts are released and time advances in the detector.
const TICK: Duration = Duration::from_millis(100);
/// How often kernel and source counters are copied into the metrics.
const TOTALS: Duration = Duration::from_secs(1);
/// Granularity of releases between ticks (see `release_delay`).
const RELEASE_GRAIN: Duration = Duration::from_millis(10);
/// Kernel events taken into the pipeline under one lock.
const BATCH: usize = 512;

pub struct RunOptions {
    pub agent: AgentOptions,
    /// Post Kubernetes Events, at most this many per minute.
    pub events: Option<u32>,
    /// Add a `pod` label to workload metrics.
    pub metrics_pod_label: bool,
    /// Series per metric family with user-chosen labels (`--max-series-per-metric`).
    pub max_series_per_metric: usize,
    pub listen: SocketAddr,
    /// `/api/v1/incidents` on its own address or off; `None`: on `listen`.
    pub api_listen: Option<http::ApiListen>,
    pub stats_interval: Duration,
    pub detector: DetectorConfig,
    pub reorder_window: Duration,
    /// How long final accounting waits for the pod source to name an incident's pod.
    pub metadata_wait: Duration,
}

pub async fn run(opts: RunOptions) -> anyhow::Result<()> {
    let agent::Agent {
        env,
        mut probes,
        mut stream,
        inventory,
        mut pod_updates,
        source_stats,
    } = agent::start(&opts.agent)?;
    let has_pod_source = inventory.has_pod_source;
    let mut detector = opts.detector;
    if !has_pod_source {
        detector.pod_ip_wait_ns = 0; // no IPs will ever come
    }
    let pipeline = Arc::new(Mutex::new(
        Pipeline::new(inventory, detector, opts.reorder_window.as_nanos() as u64)
            .with_metadata_wait(
                opts.metadata_wait,
                has_pod_source.then(|| opts.agent.source.refresh.clone()),
            ),
    ));
    let metrics = Arc::new(Mutex::new(
        Metrics::new(
            opts.metrics_pod_label,
            env!("CARGO_PKG_VERSION"),
            &env.kernel_release,
        )
        .with_max_series(opts.max_series_per_metric),
    ));
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
        opts.api_listen,
        HttpState {
            ready: ready.clone(),
            stream: stream.stats.clone(),
            pipeline: pipeline.clone(),
            metrics: metrics.clone(),
        },
        http::Limits::default(),
        async move { stop.notified().await },
    )
    .await
    .with_context(|| match opts.api_listen {
        Some(http::ApiListen::On(api)) => format!("cannot listen on {} and {api}", opts.listen),
        _ => format!("cannot listen on {}", opts.listen),
    })?;
    ready.store(true, Relaxed);

    let mut stats = tokio::time::interval(opts.stats_interval);
    stats.tick().await;
    let mut tick = tokio::time::interval(TICK);
    let mut totals = tokio::time::interval(TOTALS);
    let signal = shutdown::signal();
    tokio::pin!(signal);
    let mut stopping = false;
    let lock = || pipeline.lock().expect("pipeline lock");
    let mut budget = LogBudget::new(Instant::now());
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        let until_due = lock()
            .next_release_boot_ns()
            .map(|due| release_delay(due, clock::boot_now_ns()));
        tokio::select! {
            n = stream.events.recv_many(&mut batch, BATCH) => {
                if n == 0 {
                    break; // the reader stopped and the channel is empty
                }
                let p = &mut *lock();
                batch.drain(..).for_each(|ev| p.kernel_event(&ev));
            }
            Some(update) = pod_updates.recv() => lock().pod_update(update),
            _ = tick.tick() => advance(&mut lock(), &metrics, events.as_ref(), &mut budget),
            // A held fact (a listener coming up) reaches the detector as soon as the
            // reorder window allows, not up to a tick later.
            _ = tokio::time::sleep(until_due.unwrap_or(TICK)), if until_due.is_some() => {
                advance(&mut lock(), &metrics, events.as_ref(), &mut budget);
            }
            _ = totals.tick() => {
                {
                    // One hold of each lock for every total the metrics copy.
                    let p = lock();
                    let mut m = metrics.lock().expect("metrics lock");
                    if let Ok(kernel) = probes.counts() {
                        m.update_totals(
                            &kernel,
                            &p.counts,
                            p.inventory.unattributed_events(),
                            source_name,
                            source_stats.errors(),
                        );
                        m.update_stream(
                            stream.stats.dropped_in_agent.load(Relaxed),
                            stream.stats.decode_errors.load(Relaxed),
                        );
                    }
                    m.update_bounds(bounds_totals(&p, &budget));
                    if let Some(events) = &events {
                        let s = &events.stats;
                        m.update_events_not_posted(
                            s.dropped.load(Relaxed),
                            s.failed.load(Relaxed),
                        );
                    }
                    log_suppressed(&p, &mut budget);
                }
                read_suppressed(&mut probes, &mut lock(), &metrics, false);
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
        let step = p.flush(clock::boot_now_ns());
        log_changes(p, &step, &mut budget);
        metrics
            .lock()
            .expect("metrics lock")
            .record(&step, p, Instant::now());
        read_suppressed(&mut probes, p, &metrics, true);
    }
    log_counts(&probes, &stream, &lock(), &source_stats);
    stop_http.notify_one();
    server.await??;
    Ok(())
}

/// What the agent's bounds dropped or reordered so far.
fn bounds_totals(p: &Pipeline, budget: &LogBudget) -> BoundsTotals {
    BoundsTotals {
        incidents_evicted: p.detector.incidents().evicted(),
        facts_out_of_order: p.facts_out_of_order(),
        listeners_dropped: p.detector.listeners_dropped(),
        log_lines_suppressed: budget.suppressed(),
    }
}

/// Adds what the kernel counted instead of sending since the last reading, and
/// deletes the entries of removed cgroups once their final value is in.
fn read_suppressed(
    probes: &mut crate::kernel::probes::Probes,
    p: &mut Pipeline,
    metrics: &Mutex<Metrics>,
    last: bool,
) {
    match probes.suppressed() {
        Ok(counts) => {
            let reading = p.read_suppressed(&counts, last);
            metrics
                .lock()
                .expect("metrics lock")
                .add_suppressed(&reading.deltas);
            reading
                .forget
                .iter()
                .for_each(|id| probes.forget_suppressed(*id));
        }
        Err(e) => tracing::warn!("cannot read suppressed refusal counts: {e}"),
    }
}

/// Releases due facts to the detector, lets time pass, and accounts for the changes.
fn advance(
    p: &mut Pipeline,
    metrics: &Mutex<Metrics>,
    events: Option<&EventPublisher>,
    budget: &mut LogBudget,
) {
    let step = p.tick(clock::boot_now_ns());
    log_changes(p, &step, budget);
    metrics
        .lock()
        .expect("metrics lock")
        .record(&step, p, Instant::now());
    if let Some(events) = events {
        publish(events, p, &step);
    }
}

/// How long until a fact due at `due` (boot ns) may be released, rounded up to
/// `RELEASE_GRAIN` so a storm of held facts wakes the detector at most 100 times a
/// second.
fn release_delay(due: u64, now: u64) -> Duration {
    let grain = RELEASE_GRAIN.as_nanos() as u64;
    let wait = due.saturating_sub(now);
    Duration::from_nanos(wait.div_ceil(grain) * grain)
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

/// Races whose accounting is due (and late refusals of accounted ones) become Events
/// on their pods, and a stuck Job as soon as it is found (it stays stuck until someone
/// acts); `app_not_ready` never does.
fn publish(events: &EventPublisher, p: &Pipeline, step: &Step) {
    let is_stuck_job = |id: u64| {
        p.incident(id)
            .is_some_and(|i| matches!(i.subject, Subject::StuckJob { .. }))
    };
    let from_changes = step.changes.iter().filter_map(|c| match c {
        Change::Refused(id) if p.is_settled(*id) => Some(*id),
        Change::Opened(id) if is_stuck_job(*id) => Some(*id),
        _ => None,
    });
    let settled = step.settled.iter().copied().filter(|id| !is_stuck_job(*id));
    for id in settled.chain(from_changes) {
        let Some(inc) = p.incident(id) else { continue };
        if let Some(notice) = notice_for(&p.view(inc)) {
            events.notify(notice);
        }
    }
}

/// One line per pod whose incident log lines the budget suppressed, when due.
fn log_suppressed(p: &Pipeline, budget: &mut LogBudget) {
    for (pod_uid, n) in budget.summary(Instant::now()) {
        let pod = p.inventory.pods.pod(&pod_uid);
        let name = pod.map_or_else(
            || pod_uid.clone(),
            |p| format!("{}/{}", p.namespace, p.name),
        );
        tracing::warn!(
            pod_uid = %pod_uid,
            suppressed = n,
            "{n} incident log lines suppressed for pod {name}"
        );
    }
}

/// One structured log line per incident opened and re-phased, and one when its final
/// accounting is due ("incident resolved": metrics and Events count it then too),
/// within the log budget (per pod and for the node).
fn log_changes(p: &Pipeline, step: &Step, budget: &mut LogBudget) {
    let now = Instant::now();
    let shown = step.changes.iter().filter_map(|c| match c {
        Change::Opened(id) => Some((*id, "incident opened")),
        Change::Rephased { id, .. } if !p.is_settled(*id) => Some((*id, "incident phase changed")),
        _ => None,
    });
    let settled = step.settled.iter().map(|id| (*id, "incident resolved"));
    for (id, what) in shown.chain(settled) {
        let Some(inc) = p.incident(id) else { continue };
        if !budget.allow(&inc.pod_uid, now) {
            continue;
        }
        let v = p.view(inc);
        tracing::info!(
            incident = v.id,
            kind = v.kind.as_str(),
            phase = v.phase.as_str(),
            state = v.state.as_str(),
            pod_uid = %v.pod_uid,
            namespace = v.namespace.as_deref().unwrap_or(""),
            pod = v.pod.as_deref().unwrap_or(""),
            container = v.container.as_deref().unwrap_or(""),
            container_id = v.container_id.as_deref().unwrap_or(""),
            container_role = v.container_role,
            sidecar = v.sidecar.as_deref().unwrap_or(""),
            sidecar_role = v.sidecar_role,
            pattern = v.pattern.as_str(),
            port = v.port,
            destination = v.destination.as_deref().unwrap_or(""),
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
            let suppressed: u64 = counts.values().map(|c| c.suppressed).sum();
            let delivered: u64 = Kind::ALL.iter().map(|k| stats.delivered(*k)).sum();
            tracing::info!(
                ?seen,
                lost_in_kernel = lost,
                suppressed_in_kernel = suppressed,
                delivered,
                dropped_in_agent = stats.dropped_in_agent.load(Relaxed),
                cgroups = p.inventory.cgroups.len(),
                pods = p.inventory.pods.len(),
                incidents = p.detector.incidents().len(),
                refusals_other = p.counts.refusals_other,
                self_refusals = p.counts.self_refusals,
                unattributed = p.inventory.unattributed_events(),
                pod_source_errors = sources.errors(),
                "kernel event counts"
            );
        }
        Err(e) => tracing::warn!("cannot read kernel counters: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_wait_for_the_due_time_rounded_up_to_the_grain() {
        let ms = Duration::from_millis;
        assert_eq!(release_delay(1_000_000, 0), ms(10));
        assert_eq!(release_delay(25_000_000, 0), ms(30));
        assert_eq!(release_delay(30_000_000, 10_000_000), ms(20));
        assert_eq!(release_delay(5, 10), Duration::ZERO);
    }
}
