//! `sidecar-race-agent trace`: every kernel event as a JSON line on stdout, with the
//! pod and container it belongs to.

use std::{
    collections::BTreeSet,
    io::{self, Write},
    sync::atomic::Ordering::Relaxed,
    time::{Duration, Instant},
};

use serde_json::json;

use crate::{
    agent::{self, AgentOptions},
    clock,
    ingest::events::{KernelEvent, Kind},
    inventory::{Attribution, pending::Pending},
    shutdown,
    trace::{
        record::TraceRecord,
        view::{self as trace_view, TraceFilter, TraceFormat},
    },
};

/// How often waiting events are re-checked for names.
const PENDING_TICK: Duration = Duration::from_millis(100);

/// What `trace` prints and how.
pub struct View {
    pub filter: TraceFilter,
    pub format: TraceFormat,
}

pub async fn run(
    opts: AgentOptions,
    kinds: BTreeSet<Kind>,
    attribution_wait: Duration,
    view: View,
) -> anyhow::Result<()> {
    // Before the start, so a Ctrl-C while it loads still ends with the summary.
    let signal = shutdown::signal();
    tokio::pin!(signal);
    let mut agent = agent::start(&opts)?;
    let mut out = Output {
        writer: io::BufWriter::new(io::stdout().lock()),
        broken: false,
        view,
    };
    if out.view.format == TraceFormat::Table {
        out.line(&trace_view::header());
        out.flush();
    }
    let mut pending: Pending<(KernelEvent, Option<String>)> = Pending::new(attribution_wait);
    let mut tick = tokio::time::interval(PENDING_TICK);
    let mut stopping = false;
    while !out.broken {
        tokio::select! {
            batch = agent.stream.events.recv() => {
                let Some(batch) = batch else { break };
                for mut ev in batch {
                    if let Some(named) = agent.inventory.observe(&ev) {
                        ev = named;
                    }
                    if !kinds.contains(&ev.kind()) {
                        continue;
                    }
                    let (path, attribution) = agent.inventory.attribute_with_path(ev.cgroup_id());
                    if let Some((item, a)) = pending.push((ev, path), attribution, &agent.inventory, Instant::now()) {
                        out.write(&item, a);
                    }
                }
            }
            Some(update) = agent.pod_updates.recv() => agent.inventory.apply(update),
            _ = tick.tick(), if !pending.is_empty() => {}
            _ = &mut signal, if !stopping => {
                stopping = true;
                agent.stream.stop();
            }
        }
        for (item, a) in pending.ready(&agent.inventory, Instant::now()) {
            out.write(&item, a);
        }
        // Flush when the burst is over, so scripts see events promptly.
        if agent.stream.events.is_empty() {
            out.flush();
        }
    }
    for (item, a) in pending.drain(&agent.inventory) {
        out.write(&item, a);
    }
    out.flush();
    summary(&agent)?;
    Ok(())
}

struct Output<W: Write> {
    writer: W,
    /// The reader of stdout went away: stop.
    broken: bool,
    view: View,
}

impl<W: Write> Output<W> {
    fn write(&mut self, (ev, path): &(KernelEvent, Option<String>), a: Attribution) {
        let record = TraceRecord::new(ev, path.clone(), a);
        if !self.view.filter.matches(&record) {
            return;
        }
        let line = match self.view.format {
            TraceFormat::Json => serde_json::to_string(&record).expect("trace records serialise"),
            TraceFormat::Table => {
                let unix_ns = clock::boot_to_unix_ns(ev.ts_boot_ns());
                let offset = clock::local_offset((unix_ns / 1_000_000_000) as i64);
                trace_view::row(&record, unix_ns, offset)
            }
        };
        self.line(&line);
    }

    fn line(&mut self, line: &str) {
        self.broken |= writeln!(self.writer, "{line}").is_err();
    }

    fn flush(&mut self) {
        self.broken |= self.writer.flush().is_err();
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
                json!({"seen": c.seen, "lost": c.lost, "suppressed": c.suppressed, "delivered": stats.delivered(*k)}),
            )
        })
        .collect();
    eprintln!(
        "{}",
        json!({"summary": {
            "kernel_events": kinds,
            "dropped_in_agent": stats.dropped_in_agent.load(Relaxed),
            "decode_errors": stats.decode_errors.load(Relaxed),
            "unattributed_events": agent.inventory.unattributed_events(),
            "pod_source_errors": agent.source_stats.errors(),
        }})
    );
    Ok(())
}
