//! Counters that live elsewhere (the kernel's per-CPU counts, the pipeline's counts,
//! the agent's drops and bounds), read at scrape time by a `prometheus-client`
//! collector, the way kube-state-metrics reads its state: no copies, no deltas.

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric},
    metrics::{MetricType, counter::ConstCounter, gauge::ConstGauge},
};

/// What the agent counted so far, as totals since it started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    /// The kernel's counts; `None` when its counters could not be read.
    pub kernel: Option<KernelTotals>,
    /// Refusals that are not pod-local, and those of a container on its own port.
    pub refusals_other: u64,
    pub self_refusals: u64,
    /// Kernel events whose cgroup is unknown or of an unknown layout.
    pub unattributed: u64,
    /// The pod source's name and its failures.
    pub pod_source: (&'static str, u64),
    /// Records dropped on a full pipeline, and those that could not be decoded.
    pub dropped_in_agent: u64,
    pub undecodable: u64,
    /// Kubernetes Events dropped and failed; `None` when Events are off.
    pub events_not_posted: Option<(u64, u64)>,
    pub bounds: BoundsTotals,
    /// Requests to the protected endpoints by result; `None` when `--auth` is off.
    pub auth: Option<Vec<(&'static str, u64)>>,
    /// How the agent started (`run` only).
    pub start: Option<StartTotals>,
}

/// How the agent started: what it found of the agent before it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartTotals {
    /// `loaded` (unpinned), `pinned` (loaded and pinned) or `adopted` (an earlier
    /// agent's pins).
    pub kernel_state: &'static str,
    /// `restored`, `missing`, `discarded` or `off`.
    pub checkpoint: &'static str,
    /// Records read that the kernel wrote before this agent started reading: left in
    /// the pinned rings by the agent before it, or written while none ran.
    pub records_before_start: u64,
}

/// Kernel events seen per kind, and those the full ring buffer could not take.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelTotals {
    pub seen: Vec<(&'static str, u64)>,
    pub lost: u64,
    /// Per kind: events over their container's budget, counted instead of sent.
    pub suppressed: Vec<(&'static str, u64)>,
    /// Per kernel table: sockets whose entry was gone when they left the state.
    pub entries_gone: Vec<(&'static str, u64)>,
    /// Per budget (`refusal`, `control`): writes another CPU got in first.
    pub budget_conflicts: Vec<(&'static str, u64)>,
    /// Per program: runs the kernel skipped (one of ours was running on the CPU);
    /// `None` where the kernel does not count them.
    pub recursion_misses: Option<Vec<(String, u64)>>,
}

/// What the agent's bounds dropped or reordered (see SECURITY.md, agent bounds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BoundsTotals {
    pub incidents_evicted: u64,
    pub facts_out_of_order: u64,
    pub listeners_dropped: u64,
    pub unix_facts_dropped: u64,
    pub log_lines_suppressed: u64,
}

/// Where the totals are read from at each scrape.
pub trait TotalsSource: std::fmt::Debug + Send + Sync + 'static {
    fn totals(&self) -> Totals;
}

/// The collector of a `TotalsSource`. HELP texts end in a full stop, as the
/// registry writes those of the families registered with it.
#[derive(Debug)]
pub(super) struct TotalsCollector(pub Box<dyn TotalsSource>);

impl Collector for TotalsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let t = self.0.totals();
        if let Some(kernel) = &t.kernel {
            let mut family = encoder.encode_descriptor(
                "kernel_events",
                "Kernel events seen, by kind (exact per-CPU counts).",
                None,
                MetricType::Counter,
            )?;
            for (kind, seen) in &kernel.seen {
                ConstCounter::new(*seen).encode(family.encode_family(&[("kind", *kind)])?)?;
            }
            counter(
                &mut encoder,
                "kernel_events_lost",
                "Kernel events the full ring buffer could not take.",
                kernel.lost,
            )?;
            let mut family = encoder.encode_descriptor(
                "kernel_events_suppressed",
                "Kernel events over their container's budget, by kind: counted in the kernel (exactly), not sent.",
                None,
                MetricType::Counter,
            )?;
            for (kind, n) in &kernel.suppressed {
                ConstCounter::new(*n).encode(family.encode_family(&[("kind", *kind)])?)?;
            }
            let mut family = encoder.encode_descriptor(
                "kernel_table_entries_gone",
                "Entries of a kernel LRU table gone before their use: sockets that left SYN_SENT or LISTEN without theirs (evicted, or older than the agent), budgets and local refusals a full table evicted, Unix kprobe calls whose return never came (no kretprobe instance free) or a full table evicted.",
                None,
                MetricType::Counter,
            )?;
            for (table, n) in &kernel.entries_gone {
                ConstCounter::new(*n).encode(family.encode_family(&[("table", *table)])?)?;
            }
            let mut family = encoder.encode_descriptor(
                "kernel_budget_conflicts",
                "Budget updates another CPU got in first, by budget (refusal, control): read again once, then counted over budget; never a record lost.",
                None,
                MetricType::Counter,
            )?;
            for (budget, n) in &kernel.budget_conflicts {
                ConstCounter::new(*n).encode(family.encode_family(&[("budget", *budget)])?)?;
            }
            if let Some(programs) = &kernel.recursion_misses {
                let mut family = encoder.encode_descriptor(
                    "kernel_recursion_misses",
                    "Runs of a program the kernel skipped because one of ours was already running on that CPU (its fdinfo's recursion_misses); absent before Linux 6.7, which does not count them for tracepoints and kprobes.",
                    None,
                    MetricType::Counter,
                )?;
                for (program, n) in programs {
                    ConstCounter::new(*n)
                        .encode(family.encode_family(&[("program", program.as_str())])?)?;
                }
            }
        }
        counter(
            &mut encoder,
            "refusals_other",
            "Refusals that can be no sidecar race, never incidents: not pod-local (another pod, the node), or Unix-socket refusals on a path no other container of the pod reaches (the container's own files, the nscd socket, /dev/log, a hostPath only it mounts).",
            t.refusals_other,
        )?;
        counter(
            &mut encoder,
            "self_refusals",
            "Refusals of a container on a port or socket it serves itself (its own probes, its own control socket before it binds, an earlier instance of it): never incidents.",
            t.self_refusals,
        )?;
        counter(
            &mut encoder,
            "unattributed_events",
            "Kernel events whose cgroup is unknown or of an unknown layout.",
            t.unattributed,
        )?;
        let (source, errors) = t.pod_source;
        let mut family = encoder.encode_descriptor(
            "pod_source_errors",
            "Failures of the pod metadata source.",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(errors).encode(family.encode_family(&[("source", source)])?)?;
        if let Some((dropped, failed)) = t.events_not_posted {
            let mut family = encoder.encode_descriptor(
                "k8s_events_not_posted",
                "Kubernetes Events not posted: dropped (queue full or rate limit) or failed (the API server answered an error after retries).",
                None,
                MetricType::Counter,
            )?;
            for (reason, n) in [("dropped", dropped), ("failed", failed)] {
                ConstCounter::new(n).encode(family.encode_family(&[("reason", reason)])?)?;
            }
        }
        if let Some(results) = &t.auth {
            let mut family = encoder.encode_descriptor(
                "http_auth_requests",
                "Requests to /metrics and /api/v1/incidents under --auth, by result: allowed, allowed_api_unreachable (a cached allow while the API server cannot be reached), unauthenticated (401), forbidden (403), unavailable (503: API server unreachable, no cached allow), throttled (429: a source over its token-review budget, or too many requests waiting for a review).",
                None,
                MetricType::Counter,
            )?;
            for (result, n) in results {
                ConstCounter::new(*n).encode(family.encode_family(&[("result", *result)])?)?;
            }
        }
        if let Some(start) = &t.start {
            let mut family = encoder.encode_descriptor(
                "agent_start_info",
                "How this agent started: kernel_state loaded (unpinned), pinned (loaded and pinned) or adopted (an earlier agent's pins: nothing was lost in between); checkpoint restored, missing, discarded or off.",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(1i64).encode(family.encode_family(&[
                ("kernel_state", start.kernel_state),
                ("checkpoint", start.checkpoint),
            ])?)?;
            counter(
                &mut encoder,
                "records_before_start",
                "Kernel records this agent read that were written before it started reading: left in the pinned rings by the agent before it, or written while no agent ran.",
                start.records_before_start,
            )?;
        }
        counter(
            &mut encoder,
            "kernel_events_dropped",
            "Kernel records decoded but dropped because the agent's pipeline was full.",
            t.dropped_in_agent,
        )?;
        counter(
            &mut encoder,
            "kernel_records_undecodable",
            "Kernel records the agent could not decode.",
            t.undecodable,
        )?;
        let b = t.bounds;
        for (name, help, n) in [
            (
                "incidents_evicted",
                "Incidents dropped from the history to stay within --incident-history (per pod, fairly).",
                b.incidents_evicted,
            ),
            (
                "facts_out_of_order",
                "Kernel facts that arrived behind the reorder watermark and reached the detector out of order.",
                b.facts_out_of_order,
            ),
            (
                "listeners_dropped",
                "Listeners not tracked because their pod already had the maximum of open listeners.",
                b.listeners_dropped,
            ),
            (
                "unix_facts_dropped",
                "Unix-socket refusals, binds and closes dropped while their pod waited for its metadata, because it held its maximum (256 runs of facts).",
                b.unix_facts_dropped,
            ),
            (
                "log_lines_suppressed",
                "Incident log lines suppressed by the per-pod and global log budget.",
                b.log_lines_suppressed,
            ),
        ] {
            counter(&mut encoder, name, help, n)?;
        }
        Ok(())
    }
}

/// One counter without labels.
fn counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    ConstCounter::new(value).encode(encoder.encode_descriptor(
        name,
        help,
        None,
        MetricType::Counter,
    )?)
}
