//! `cargo xtask bench`: what the agent costs, as ratios measured side by side in one
//! run, written to `BENCHMARKS.md`; `--smoke` runs the same harness in seconds with
//! debug builds and asserts nothing (the test suite runs it so it does not rot).
//! Nothing here is a timed assertion. `plan.rs` says how much to measure and the
//! targets, `measure.rs` runs the parts, `report.rs` renders the report (its prose in
//! `report_text.rs`).

mod agent;
mod bpf_stats;
mod cpu;
mod datagrams;
mod fleet;
mod hot_path;
mod latency;
mod loops;
mod measure;
mod null_prog;
mod parts;
mod peer;
mod plan;
mod refuse;
mod report;
mod report_text;
mod scale;
mod sidecar_pod;
mod stats;
mod syscalls;

use std::path::Path;

use anyhow::{Context, bail};

pub use self::parts::{Part, Parts};
use self::{
    loops::Workload,
    peer::Bpftrace,
    plan::{FULL, SMOKE},
    report::Report,
};

/// Runs the table's `parts` with the binaries in `bin` and writes the report to `out`.
pub fn bench(bin: &Path, smoke: bool, parts: &Parts, out: &Path) -> anyhow::Result<()> {
    if !refuse::is_root() {
        bail!("the benchmark attaches eBPF programs: run it as root");
    }
    let plan = if smoke { SMOKE } else { FULL };
    if !smoke && parts.has(Part::HotPath) {
        Bpftrace::install();
    }
    let mut report = Report::default();

    if parts.has(Part::Syscalls) {
        eprintln!(
            "bench: unrelated syscalls ({} rounds of {} getppid calls: bare twice, then beside the agent in each Unix hook mode; rotating)",
            plan.syscall_rounds, plan.syscall_calls
        );
        report.syscalls(&syscalls::measure(bin, &plan)?);
    }

    // The statistics' cost per run of the last loop whose null programs ran, for a loop
    // where none run (UDS, UDP).
    let mut stats_ns = None;
    if parts.has(Part::HotPath) {
        for w in Workload::ALL {
            eprintln!("bench: {} (bare, agent, bpftrace; alternating)", w.label());
            let h = hot_path::measure(bin, &plan, w, stats_ns)?;
            stats_ns = stats::Spread::of(&h.stats_ns_per_run).map(|s| s.median);
            report.hot_path(&h);
        }
        if !Bpftrace::available() {
            report.no_peer();
        }
    }

    if parts.has(Part::Datagrams) {
        let mut measured = Vec::new();
        for w in Workload::DATAGRAMS {
            eprintln!("bench: {} (bare, agent; alternating)", w.label());
            let h = hot_path::measure(bin, &plan, w, stats_ns)?;
            stats_ns = stats::Spread::of(&h.stats_ns_per_run)
                .map(|s| s.median)
                .or(stats_ns);
            measured.push(h);
        }
        // Delivered UDP first, as the table reads.
        for h in measured.iter().rev() {
            report.hot_path(h);
        }
    }

    if parts.has(Part::Refusals) {
        eprintln!("bench: refused connects (TCP, then UDS)");
        report.refused(&plan, &measure::refusals(bin, &plan)?);
        report.uds_refused(&plan, &measure::uds_refusals(bin, &plan)?);
    }

    if parts.has(Part::Scale) {
        eprintln!(
            "bench: node scale ({} simulated pods, {:?})",
            plan.scale_pods, plan.scale
        );
        report.node_scale(&plan, &measure::node_scale(bin, &plan)?);
    }

    if parts.has(Part::Startup) {
        eprintln!("bench: start-up with {} extra cgroups", plan.index_cgroups);
        let (plain, many) = measure::index_build(bin, &plan)?;
        report.start_up(&plan, &plain, &many);
    }

    if parts.has(Part::Latency) {
        eprintln!(
            "bench: detection latency over {} startup races",
            plan.latency_races
        );
        report.latency(&latency::measure(bin, plan.latency_races)?);
    }

    if parts.has(Part::Storm) {
        let secs = plan.storm.as_secs();
        eprintln!("bench: storm ({secs} s of refusals next to startup races)");
        let (lat, storm) = latency::measure_storm(bin, plan.latency_races.max(200), secs as f64)?;
        report.storm(secs, &lat, &storm);
    }

    let text = report.render(&plan, parts);
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(out, &text).with_context(|| format!("write {}", out.display()))?;
    println!("{text}");
    eprintln!("bench: wrote {}", out.display());
    Ok(())
}
