//! `sidecar-race-agent run`: the long-running daemon, wired up: the agent started as
//! the node's owner, the pipeline with its restored state, the sinks and the HTTP
//! server; then the [`Daemon`]'s loop runs until SIGTERM.

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
    daemon::{Daemon, checkpoint, totals},
    detect::DetectorConfig,
    http::{self, HttpState},
    kernel::probes::Origin,
    pipeline::Pipeline,
    shutdown,
    sinks::{fan_out::Sinks, incident_logs::IncidentLogs, metrics::Metrics},
};

mod kube_clients;
mod otlp;
mod owner;

use otlp::Otlp;
pub use otlp::OtlpOptions;

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

/// Starts the agent, then runs the daemon as a task on the runtime's workers, beside
/// the ring-buffer reader. On the thread that blocks on `main` instead, every batch
/// the reader handed over woke that thread too: a second thread switch per batch, a
/// third of the agent's CPU per refusal in a flood (profiled with `perf`). On a
/// worker, the woken loop runs next on the reader's own thread. The start stays on
/// this thread: its BTF parses are freed into the main heap, which gives them back,
/// where a worker's heap kept some 9 MiB of them resident.
pub async fn run(mut opts: RunOptions) -> anyhow::Result<()> {
    // A bad collector URL stops the agent before anything is loaded.
    let otlp = opts.otlp.as_ref().map(Otlp::new).transpose()?;
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
    otlp: Option<Otlp>,
    signal: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
) -> anyhow::Result<()> {
    let agent::Agent {
        env,
        mut probes,
        stream,
        inventory,
        pod_updates,
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
    let logs = IncidentLogs::new(Instant::now());
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
    let (otlp_metrics, otlp_logs) = match otlp {
        Some(o) => (Some(o.metrics), o.logs),
        None => (None, None),
    };
    let mut sinks = Sinks::default().with(logs).with(metrics.clone());
    if let Some(events) = events {
        sinks.add(events);
    }
    let otlp_logs = otlp_logs.map(|(sink, exporter)| {
        sinks.add(sink);
        otlp::spawn_logs(exporter)
    });
    if let Some(checkpoint::Restore::Restored(r)) = &restore {
        // Incidents of pods gone while no agent ran, ended by the restore.
        sinks.consume(&r.outcomes, Instant::now());
    }
    let stop_otlp = Arc::new(Notify::new());
    let otlp_metrics =
        otlp_metrics.map(|e| tokio::spawn(e.run(metrics.clone(), stop_otlp.clone())));
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

    Daemon {
        pipeline,
        probes,
        stream,
        pod_updates,
        sinks,
        checkpoint,
        totals,
        stats_interval: opts.stats_interval,
        started_boot_ns,
        cut_boot_ns,
        ready,
    }
    .run(signal)
    .await;
    // The last pushes hold the final counts and the last records (the daemon's sinks
    // are dropped, so the log task sends what is left and ends); a collector that does
    // not answer within the limit does not hold the agent's exit.
    stop_otlp.notify_one();
    let last_pushes = async {
        if let Some(export) = otlp_metrics {
            let _ = export.await;
        }
        if let Some(export) = otlp_logs {
            let _ = export.await;
        }
    };
    let _ = tokio::time::timeout(OTLP_LAST_PUSH, last_pushes).await;
    stop_http.notify_one();
    server.await??;
    Ok(())
}
