//! Start-up shared by every command that watches the kernel: requirements, layout,
//! probes, cgroup index, event stream.

use std::{path::PathBuf, sync::Arc, time::Duration};

use thiserror::Error;

use tokio::sync::mpsc;

use crate::{
    ingest::stream::EventStream,
    inventory::cgroups::CgroupIndex,
    inventory::{
        Inventory,
        sources::{self, PodSourceSpec, PodUpdate, SourceOptions, SourceStats},
        store::PodStore,
    },
    kernel::{
        attach::ProbeError,
        globals::ProcessNames,
        layout::ICMP_PROGRAM,
        options::ProbeOptions,
        pins::Pins,
        probes::{Origin, Probes},
        requirements::{self, Environment, Locations, MissingRequirements},
        tracepoints::SetStateHook,
    },
};

#[derive(Debug, Clone)]
pub struct AgentOptions {
    pub tracefs: Option<PathBuf>,
    pub cgroup_root: Option<PathBuf>,
    pub probes: ProbeOptions,
    pub channel_capacity: usize,
    /// How long removed cgroups and deleted pods stay resolvable.
    pub grace: Duration,
    pub pods_from: PodSourceSpec,
    pub source: SourceOptions,
    /// Site-wide classic sidecar names.
    pub sidecar_names: Vec<String>,
    /// Pin the kernel state there (or adopt what an earlier agent pinned).
    pub pins: Option<Pins>,
}

#[derive(Debug, Error)]
pub enum StartError {
    // Transparent: `main` prints the error chain (`{:#}`), and a `{0}` message with the
    // same error as its source printed every sentence twice.
    #[error(transparent)]
    Requirements(#[from] MissingRequirements),
    #[error(transparent)]
    Probes(#[from] ProbeError),
    #[error("cannot read the cgroup2 hierarchy at {path}: {source}")]
    CgroupScan {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot watch the ring buffer: {0}")]
    Stream(std::io::Error),
}

pub struct Agent {
    pub env: Environment,
    pub probes: Probes,
    pub stream: EventStream,
    pub inventory: Inventory,
    pub pod_updates: mpsc::Receiver<PodUpdate>,
    pub source_stats: Arc<SourceStats>,
}

/// Checks the node, loads and attaches the programs, indexes cgroups and starts the
/// reader. Degraded capabilities are logged, not fatal.
pub fn start(opts: &AgentOptions) -> Result<Agent, StartError> {
    let env = requirements::check(&Locations {
        tracefs: opts.tracefs.clone(),
        cgroup2: opts.cgroup_root.clone(),
    })?;
    let mut probes = match &opts.pins {
        Some(pins) => Probes::start_pinned(&env.layout, opts.probes, pins, &env.kernel_release)?,
        None => Probes::load(&env.layout, opts.probes)?,
    };
    match &probes.origin {
        Origin::Loaded => {}
        Origin::Pinned { key } => {
            tracing::info!(%key, "programs and maps pinned: they outlive this agent")
        }
        Origin::Adopted { key, pinned_by } => tracing::info!(
            %key,
            pinned_by = %pinned_by,
            "adopted the programs and maps an earlier agent pinned: what the kernel \
             recorded while no agent ran is read now"
        ),
    }
    if let Some(h) = &probes.handover {
        tracing::info!(
            records = h.events.len(),
            duplicates_skipped = h.duplicates_skipped,
            "read what an earlier build's agent left in its rings, up to the moment this \
             build's programs were attached"
        );
    }
    // Under lockdown, one sentence (`requirements::check`) said what is not seen.
    let locked = env.layout.direct_reads();
    // What tracefs could not serve, unless its BTF tracepoint did. A kernel without
    // icmp_send has kfree_skb see its UDP refusals: only an explicit
    // `--udp-hook=icmp-send` says so (`tracepoints::attach_all`).
    for u in env.layout.unusable.iter().filter(|u| {
        !locked
            && !u.tracepoint.required
            && !probes.attached.contains(&u.tracepoint)
            && u.tracepoint.program != ICMP_PROGRAM
    }) {
        tracing::warn!("degraded: {u}");
    }
    for d in &probes.degraded {
        tracing::warn!(
            "degraded: tracepoint {}:{} not attached ({}): {} disabled",
            d.tracepoint.category,
            d.tracepoint.name,
            d.reason,
            d.tracepoint.capability
        );
    }
    // Index first, then read: a cgroup made in between is both scanned and reported.
    let mut cgroups = CgroupIndex::new(&env.cgroup2, opts.grace.as_nanos() as u64);
    cgroups.scan().map_err(|source| StartError::CgroupScan {
        path: env.cgroup2.clone(),
        source,
    })?;
    let ring = probes.ring.take().expect("ring buffer taken once");
    let control = probes.control.take().expect("control ring taken once");
    let stream =
        EventStream::spawn(ring, control, opts.channel_capacity).map_err(StartError::Stream)?;
    tracing::info!(
        kernel = %env.kernel_release,
        tracefs = %env
            .tracefs
            .as_ref()
            .map_or("none (BTF tracepoints)".into(), |t| t.root().display().to_string()),
        cgroup2 = %env.cgroup2.display(),
        cgroups = cgroups.len(),
        attached = ?probes.attached.iter().map(|t| t.name).collect::<Vec<_>>(),
        set_state_hook = %probes.set_state_hook,
        tcp_hooks = probes.tcp.name(),
        unix_hooks = probes.unix.name(),
        "watching the kernel"
    );
    if let Some(sentence) = probes.unix.degraded().filter(|_| !locked) {
        tracing::warn!("degraded: {sentence}");
    }
    if let Some(sentence) = probes.unix.note() {
        tracing::info!("{sentence}");
    }
    if let Some(sentence) = probes.tcp.degraded().filter(|_| !locked) {
        tracing::warn!("degraded: {sentence}");
    }
    if let Some(sentence) = probes.tcp.note() {
        tracing::info!("{sentence}");
    }
    if let SetStateHook::Tracepoint { why_not_btf } = &probes.set_state_hook {
        tracing::info!("inet_sock_set_state through tracefs, not tp_btf: {why_not_btf}");
    }
    if let Some(why) = probes.per_cgroup_budgets.as_ref().filter(|_| !locked) {
        tracing::warn!(
            "degraded: budgets are charged per cgroup, not per container (the kernel's \
             cgroup layout is unknown: {why}); a container that makes sub-cgroups gets a \
             budget for each"
        );
    }
    if let ProcessNames::Thread { why_not_leader } = &probes.process_names {
        tracing::warn!(
            "refused processes are named by their thread, not their process (no task_struct offsets: {why_not_leader})"
        );
    }
    let (tx, pod_updates) = mpsc::channel(64);
    let source_stats = Arc::new(SourceStats::default());
    let has_pod_source = sources::spawn(
        &opts.pods_from,
        opts.source.clone(),
        tx,
        source_stats.clone(),
    )
    .is_some();
    tracing::info!(pods_from = %opts.pods_from, "pod metadata source");
    Ok(Agent {
        env,
        probes,
        stream,
        inventory: Inventory::new(cgroups, PodStore::new(opts.grace), has_pod_source)
            .with_site_sidecars(opts.sidecar_names.clone()),
        pod_updates,
        source_stats,
    })
}
