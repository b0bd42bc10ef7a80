//! `sidecar-race-agent run`: the long-running daemon.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering::Relaxed},
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::{
    agent::{self, AgentOptions},
    checkpoint::CheckpointFile,
    cli::{AuthMode, StateArgs},
    clock,
    detect::DetectorConfig,
    http::{self, HttpState},
    kernel::{charge_points::ChargePoints, probes::Origin},
    pipeline::Pipeline,
    pipeline::outcome::Outcome,
    shutdown,
    sinks::incident_logs::IncidentLogs,
    sinks::k8s_events::EventPublisher,
    sinks::{metrics::Metrics, otlp::Exporter},
};

pub mod checkpoint;
mod kube_clients;
mod owner;
mod totals;
mod udp_bound;

/// How often held facts are released and time advances in the detector.
const TICK: Duration = Duration::from_millis(100);
/// How often the kernel's suppressed-refusal counts are read.
const SUPPRESSED: Duration = Duration::from_secs(1);
/// Granularity of releases between ticks (see `release_delay`).
const RELEASE_GRAIN: Duration = Duration::from_millis(10);
/// Kernel events taken into the pipeline under one lock.
const BATCH: usize = 512;
/// How long the last OTLP push may hold the agent's exit.
const OTLP_LAST_PUSH: Duration = Duration::from_secs(3);

pub struct RunOptions {
    pub agent: AgentOptions,
    /// Post Kubernetes Events, at most this many per minute.
    pub events: Option<u32>,
    /// Add a `pod` label to workload metrics.
    pub metrics_pod_label: bool,
    /// Series per metric family with user-chosen labels (`--max-series-per-metric`).
    pub max_series_per_metric: usize,
    /// Series not written for this long are dropped (`--series-ttl`).
    pub series_ttl: Duration,
    /// Who may read `/metrics` and `/api/v1/incidents` (`--auth`).
    pub auth: AuthMode,
    pub listen: SocketAddr,
    /// `/api/v1/incidents` on its own address or off; `None`: on `listen`.
    pub api_listen: Option<http::ApiListen>,
    /// Serve over TLS with these files (`--tls-cert-file`, `--tls-key-file`).
    pub tls: Option<http::tls::TlsFiles>,
    pub stats_interval: Duration,
    pub detector: DetectorConfig,
    pub reorder_window: Duration,
    /// How long final accounting waits for the pod source to name an incident's pod.
    pub metadata_wait: Duration,
    /// Push the metrics over OTLP (`--otlp-endpoint`).
    pub otlp: Option<OtlpOptions>,
    /// `--pin`, `--bpffs`, `--state-dir`.
    pub state: StateArgs,
    /// The checkpoint file: restored at start, written at SIGTERM with the rest of the
    /// ring left unread for the next agent. `None`: a stop takes the whole ring and
    /// accounts for every open incident.
    pub checkpoint: Option<std::path::PathBuf>,
}

pub struct OtlpOptions {
    pub endpoint: String,
    pub interval: Duration,
}

/// Starts the agent, then runs the daemon as a task on the runtime's workers, beside
/// the ring-buffer reader. On the thread that blocks on `main` instead, every batch
/// the reader handed over woke that thread too: a second thread switch per batch, a
/// third of the agent's CPU per refusal in a flood (profiled with `perf`). On a
/// worker, the woken loop runs next on the reader's own thread. The start stays on
/// this thread: its BTF parses are freed into the main heap, which gives them back,
/// where a worker's heap kept some 9 MiB of them resident.
pub async fn run(mut opts: RunOptions) -> anyhow::Result<()> {
    // A bad collector URL stops the agent before anything is loaded.
    let otlp = opts
        .otlp
        .as_ref()
        .map(|o| Exporter::new(&o.endpoint, o.interval))
        .transpose()?;
    // Before anything is loaded: a SIGTERM while the agent starts stops it cleanly
    // (with its checkpoint) once the loop runs, instead of killing it.
    let signal = Box::pin(shutdown::signal());
    let (agent, lock) = owner::start_owned(&opts.state, &opts.agent)?;
    if lock.is_none() {
        // Not the node's owner of kept state: nothing to restore or leave behind.
        opts.checkpoint = None;
    }
    match tokio::spawn(daemon(opts, agent, otlp, signal)).await {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(anyhow::anyhow!("the daemon task was cancelled: {e}")),
    }
}

async fn daemon(
    opts: RunOptions,
    agent: agent::Agent,
    otlp: Option<Exporter>,
    mut signal: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
) -> anyhow::Result<()> {
    let agent::Agent {
        env,
        mut probes,
        mut stream,
        inventory,
        mut pod_updates,
        source_stats,
    } = agent;
    let has_pod_source = inventory.has_pod_source;
    let pipeline = Arc::new(Mutex::new(
        Pipeline::new(
            inventory,
            opts.detector,
            opts.reorder_window.as_nanos() as u64,
        )
        .with_metadata_wait(
            opts.metadata_wait,
            has_pod_source.then(|| opts.agent.source.refresh.clone()),
        ),
    ));
    let checkpoint = opts
        .checkpoint
        .as_ref()
        .and_then(|path| match CheckpointFile::new(path) {
            Ok(file) => Some(file),
            Err(e) => {
                tracing::warn!("{e}: no checkpoint is read or written");
                None
            }
        });
    // Before the loop takes the first record from the ring. (`Restore::is_restored`:
    // whether the previous agent's state was carried over.)
    let adopted = matches!(probes.origin, Origin::Adopted { .. });
    let restore = checkpoint
        .as_ref()
        .map(|file| checkpoint::restore(file, &mut pipeline.lock(), clock::boot_now_ns(), adopted));
    if adopted
        && !restore
            .as_ref()
            .is_some_and(checkpoint::Restore::is_restored)
    {
        // The adopted counts are history since the pins were made, none of it read.
        pipeline.lock().suppressed_from_now();
    }
    // What an earlier build's rings held up to the cut, after the restored state; the
    // new rings' records before the cut are the same ones again.
    let handover = probes.handover.take();
    let cut_boot_ns = handover.as_ref().map_or(0, |h| h.cut_boot_ns);
    let start = Arc::new(totals::Start {
        kernel_state: match probes.origin {
            Origin::Loaded => "loaded",
            Origin::Pinned { .. } => "pinned",
            Origin::Adopted { .. } => "adopted",
        },
        checkpoint: match &restore {
            None => "off",
            Some(checkpoint::Restore::Missing) => "missing",
            Some(checkpoint::Restore::Discarded(_)) => "discarded",
            Some(checkpoint::Restore::Restored(_)) => "restored",
        },
        records_before_start: AtomicU64::new(
            handover.as_ref().map_or(0, |h| h.events.len() as u64),
        ),
    });
    // Records in adopted rings written before now were left by the agent before this
    // one, or written while none ran; a fresh load's rings hold none.
    let started_boot_ns = if adopted { clock::boot_now_ns() } else { 0 };
    if let Some(h) = handover {
        let p = &mut *pipeline.lock();
        h.events.iter().for_each(|ev| p.kernel_event(ev));
    }
    let source_name = opts.agent.pods_from.name();
    let events = match opts.events {
        Some(per_minute) => kube_clients::start_events(&opts.agent, per_minute).await,
        None => None,
    };
    let auth = match opts.auth {
        AuthMode::None => None,
        AuthMode::Kubernetes => Some(kube_clients::start_auth().await?),
    };
    let mut logs = IncidentLogs::new(Instant::now());
    let totals = totals::NodeTotals {
        pipeline: pipeline.lock().totals(),
        kernel: probes.counters(),
        stream: stream.stats.clone(),
        source: source_name,
        source_stats: source_stats.clone(),
        events: events.as_ref().map(|e| e.stats.clone()),
        log_lines_suppressed: logs.budget().suppressed_counter(),
        auth: auth.as_ref().map(|a| a.counts.clone()),
        start: start.clone(),
    };
    let metrics = Arc::new(Mutex::new(
        Metrics::new(
            opts.metrics_pod_label,
            env!("CARGO_PKG_VERSION"),
            &env.kernel_release,
        )
        .with_max_series(opts.max_series_per_metric)
        .with_series_ttl(opts.series_ttl)
        .with_totals(Box::new(totals.clone())),
    ));
    if let Some(checkpoint::Restore::Restored(r)) = &restore {
        // Incidents of pods gone while no agent ran, ended by the restore.
        account(&r.outcomes, &metrics, events.as_ref(), &mut logs);
    }
    let stop_otlp = Arc::new(Notify::new());
    let otlp = otlp.map(|e| tokio::spawn(e.run(metrics.clone(), stop_otlp.clone())));
    let ready = Arc::new(AtomicBool::new(false));
    let stop_http = Arc::new(Notify::new());
    let stop = stop_http.clone();
    let tls = opts
        .tls
        .clone()
        .map(http::tls::Reloading::new)
        .transpose()
        .context("--tls-cert-file, --tls-key-file")?
        .map(Arc::new);
    let server = http::serve(
        opts.listen,
        opts.api_listen,
        HttpState {
            ready: ready.clone(),
            degraded: env.degraded.as_deref().map(Arc::from),
            stream: stream.stats.clone(),
            pipeline: pipeline.clone(),
            metrics: metrics.clone(),
            auth,
        },
        http::Limits::default(),
        tls,
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
    let mut suppressed = tokio::time::interval(SUPPRESSED);
    let mut periodic = tokio::time::interval(checkpoint::EVERY);
    periodic.tick().await;
    let (mut read_since_saved, mut save_failing) = (false, false);
    let mut stopping = false;
    let lock = || pipeline.lock();
    let mut charge_points = ChargePoints::with_marked(probes.charge_point_ids());
    charge_points.sync(&lock().inventory().cgroups, &mut probes);
    loop {
        let until_due = lock()
            .next_release_boot_ns()
            .map(|due| release_delay(due, clock::boot_now_ns()));
        tokio::select! {
            batch = stream.events.recv() => {
                let Some(batch) = batch else {
                    break; // the reader stopped and the channel is empty
                };
                if started_boot_ns > 0 {
                    let before = batch.iter().filter(|ev| ev.ts_boot_ns() < started_boot_ns).count();
                    start.records_before_start.fetch_add(before as u64, Relaxed);
                }
                // A scrape waits for at most one chunk.
                for chunk in batch.chunks(BATCH) {
                    let p = &mut *lock();
                    chunk
                        .iter()
                        .filter(|ev| ev.ts_boot_ns() >= cut_boot_ns)
                        .for_each(|ev| p.kernel_event(ev));
                }
                read_since_saved = true;
                // New containers are charged as such from their first refusal on.
                charge_points.sync(&lock().inventory().cgroups, &mut probes);
            }
            Some(update) = pod_updates.recv() => lock().pod_update(update),
            _ = tick.tick() => {
                let now = clock::boot_now_ns();
                udp_bound::poll(&mut lock(), now);
                let outcomes = lock().tick(now);
                account(&outcomes, &metrics, events.as_ref(), &mut logs);
            }
            // A held fact (a listener coming up) reaches the detector as soon as the
            // reorder window allows, not up to a tick later.
            _ = tokio::time::sleep(until_due.unwrap_or(TICK)), if until_due.is_some() => {
                let outcomes = lock().tick(clock::boot_now_ns());
                account(&outcomes, &metrics, events.as_ref(), &mut logs);
            }
            _ = suppressed.tick() => {
                logs.summary(Instant::now());
                charge_points.sync(&lock().inventory().cgroups, &mut probes);
                let outcomes = read_suppressed(&mut probes, &pipeline, false);
                account(&outcomes, &metrics, events.as_ref(), &mut logs);
            }
            _ = stats.tick() => totals.log(),
            _ = periodic.tick(), if checkpoint.is_some() && read_since_saved && !stopping => {
                if let Some(file) = &checkpoint {
                    let state = lock().snapshot();
                    checkpoint::save_periodic(file, state, clock::boot_now_ns(), &mut save_failing);
                }
                read_since_saved = false;
            }
            _ = &mut signal, if !stopping => {
                tracing::info!("stopping");
                stopping = true;
                ready.store(false, Relaxed);
                match checkpoint {
                    Some(_) => stream.leave(),
                    None => stream.stop(),
                }
            }
        }
    }
    // With a checkpoint, what the stream handed over is in the pipeline now and goes to
    // the next agent as it is: nothing is finalised or published here.
    let saved = checkpoint
        .as_ref()
        .is_some_and(|file| checkpoint::save(file, &lock(), clock::boot_now_ns()));
    if !saved {
        let mut outcomes = lock().flush(clock::boot_now_ns());
        outcomes.extend(read_suppressed(&mut probes, &pipeline, true));
        account(&outcomes, &metrics, None, &mut logs);
    }
    totals.log();
    if let Some(export) = otlp {
        // The last push holds the final counts; a collector that does not answer
        // within the limit does not hold the agent's exit.
        stop_otlp.notify_one();
        let _ = tokio::time::timeout(OTLP_LAST_PUSH, export).await;
    }
    stop_http.notify_one();
    server.await??;
    Ok(())
}

/// What the kernel counted instead of sending since the last reading, as outcomes for
/// the sinks; deletes the entries of removed cgroups once their final value is in.
/// The kernel's map is read before the pipeline's lock is taken.
fn read_suppressed(
    probes: &mut crate::kernel::probes::Probes,
    pipeline: &Mutex<Pipeline>,
    last: bool,
) -> Vec<Outcome> {
    match probes.suppressed() {
        Ok(counts) => {
            let reading = pipeline.lock().read_suppressed(&counts, last);
            reading
                .forget
                .iter()
                .for_each(|id| probes.forget_suppressed(*id));
            reading.outcomes
        }
        Err(e) => {
            tracing::warn!("cannot read suppressed refusal counts: {e}");
            Vec::new()
        }
    }
}

/// What one step of the pipeline came to, told to the sinks beside it: logs, metrics
/// and Kubernetes Events.
fn account(
    outcomes: &[Outcome],
    metrics: &Mutex<Metrics>,
    events: Option<&EventPublisher>,
    logs: &mut IncidentLogs,
) {
    let now = Instant::now();
    logs.consume(outcomes, now);
    metrics.lock().consume(outcomes, now);
    if let Some(events) = events {
        events.consume(outcomes);
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
