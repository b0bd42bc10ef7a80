//! The reporting half of `cargo xtask bench`: turns the measured samples into the rows
//! and verdicts of BENCHMARKS.md and renders it with the machine, the method and the
//! notes.

use std::fmt::Write as _;

use super::{
    agent::UnixHooks,
    fleet,
    hot_path::HotPath,
    latency::{Latency, Storm},
    loops::Workload,
    measure::{Refusals, Scale},
    parts::Parts,
    plan::{
        Plan, REORDER_WINDOW_MS, TARGET_SCALE_CPU_PERCENT, TARGET_SCALE_RSS_MIB,
        TARGET_SUCCESS_RATIO, TARGET_SYSCALL_RATIO, TARGET_US_PER_REFUSAL,
    },
    report_text::{HOOK_PATHS, NOTES, machine, method},
    stats::Spread,
    syscalls::Syscalls,
};

/// The report's two tables, filled part by part as the bench runs.
#[derive(Default)]
pub struct Report {
    /// The figures' first rows: what users pay, measured directly (CPU per connection
    /// and per unrelated syscall, with the agent / bare, beside their controls).
    headline: Vec<Vec<String>>,
    rows: Vec<Vec<String>>,
    verdicts: Vec<Vec<String>>,
}

impl Report {
    /// The unrelated-syscall rows: one per Unix hook mode, the control, bare CPU.
    pub fn syscalls(&mut self, sc: &Syscalls) {
        for mode in &sc.modes {
            let name = if mode.hooks == UnixHooks::AsShipped {
                format!(
                    "unrelated syscalls: **CPU per getppid, bare / beside the agent as shipped** ({})",
                    hooks_label(mode.hooks, mode.attached.as_deref())
                )
            } else {
                format!(
                    "unrelated syscalls: CPU per getppid, bare / beside the agent with {}",
                    hooks_label(mode.hooks, mode.attached.as_deref())
                )
            };
            self.headline.push(row(&name, &mode.ratio, 3));
        }
        self.headline.push(row(
            "unrelated syscalls: control, CPU per getppid, bare / bare (the round's second bare run)",
            &sc.control,
            3,
        ));
        self.headline.push(row(
            &format!(
                "unrelated syscalls: bare CPU per getppid (ns; {} calls a run)",
                sc.calls
            ),
            &sc.bare_ns,
            1,
        ));
        let medians: Vec<String> = sc
            .modes
            .iter()
            .map(|m| (m.hooks.flag(), &m.whole))
            .chain([("control, bare / bare", &sc.control_whole)])
            .filter_map(|(name, samples)| {
                Spread::of(samples).map(|s| format!("{name} {}", s.show(3).replace("**", "")))
            })
            .collect();
        self.rows.push(vec![
            "unrelated syscalls: over whole runs, not their cheapest chunks, bare / beside the agent (min / median / max)".into(),
            medians.join("; "),
        ]);
        let shipped = sc.modes.iter().find(|m| m.hooks == UnixHooks::AsShipped);
        if let (Some(s), Some(c)) = (
            shipped.and_then(|m| Spread::of(&m.ratio)),
            Spread::of(&sc.control),
        ) {
            self.verdicts.push(verdict(
                &format!("unrelated syscalls ≥ {TARGET_SYSCALL_RATIO}× bare, agent as shipped"),
                s.median >= TARGET_SYSCALL_RATIO,
                format!(
                    "median {:.3} (control, bare / bare: {})",
                    s.median,
                    c.show(3).replace("**", "")
                ),
            ));
        }
    }

    /// The hot-path rows of one loop shape.
    pub fn hot_path(&mut self, h: &HotPath) {
        let (l, u, t) = (h.workload.label(), h.workload.unit(), h.workload.target());
        let hooks = hooks_label(h.hooks, h.hooks_attached.as_deref());
        self.headline.push(row(
            &format!(
                "{l}: **CPU per {u}, bare / with the agent** (the loop's threads, \
                 measured directly; {hooks})"
            ),
            &h.cpu_ratio,
            3,
        ));
        self.headline.push(row(
            &format!("{l}: control, CPU per {u}, bare / bare (the round's second bare run)"),
            &h.cpu_control,
            3,
        ));
        if h.hooks == UnixHooks::AsShipped
            && let (Some(s), Some(c)) = (Spread::of(&h.cpu_ratio), Spread::of(&h.cpu_control))
        {
            self.verdicts.push(verdict(
                &format!(
                    "{t} ≥ {TARGET_SUCCESS_RATIO}× bare, {l} (loop CPU measured directly, agent as shipped)"
                ),
                s.median >= TARGET_SUCCESS_RATIO,
                format!(
                    "median {:.3} (control, bare / bare: {})",
                    s.median,
                    c.show(3).replace("**", "")
                ),
            ));
        }
        let stats =
            Spread::of(&h.stats_ns_per_run).map_or("?".into(), |s| format!("{:.0}", s.median));
        self.rows.push(row(
            &format!(
                "{l}: **bare CPU / (bare CPU + the programs' run time)** per {u} \
                 (bpf_stats, the statistics' own cost of {stats} ns per run taken out)"
            ),
            &h.bound,
            3,
        ));
        for (name, samples, digits) in [
            (
                "the statistics' own cost per program run (ns; null programs on the same hooks)"
                    .to_string(),
                &h.stats_ns_per_run,
                1,
            ),
            (format!("bare loop CPU per {u} (µs)"), &h.bare_cpu_us, 2),
            (
                format!("the agent's programs' run time per {u} (ns, statistics' cost taken out)"),
                &h.prog_ns,
                0,
            ),
            (format!("the agent's program runs per {u}"), &h.prog_runs, 2),
            (
                "throughput with the agent / bare".to_string(),
                &h.throughput,
                3,
            ),
            (
                format!(
                    "CPU per {u} over whole runs, not their cheapest chunks, bare / with the agent"
                ),
                &h.cpu_whole,
                3,
            ),
        ] {
            self.rows
                .push(row(&format!("{l}: {name}"), samples, digits));
        }
        let programs: Vec<String> = h
            .programs
            .iter()
            .filter_map(|(name, (runs, ns))| {
                let (runs, ns) = (Spread::of(runs)?, Spread::of(ns)?);
                Some(format!("`{name}` {:.2} × {:.0} ns", runs.median, ns.median))
            })
            .collect();
        self.rows.push(vec![
            format!("{l}: per program, runs per {u} × ns per run (medians, statistics included)"),
            if programs.is_empty() {
                "none ran".into()
            } else {
                programs.join("; ")
            },
        ]);
        if let Some([tracefs, btf]) = &h.null_dispatch {
            for (samples, hook) in [
                (
                    tracefs,
                    "the tracefs tracepoint `skb:kfree_skb`, `--udp-hook=kfree-skb`'s fallback",
                ),
                (
                    btf,
                    "the BTF tracepoint `kfree_skb` (`tp_btf`: no record filled), `--udp-hook=kfree-skb`'s hook where the kernel takes it",
                ),
            ] {
                let name = format!(
                    "{l}: CPU per {u}, bare / with a null program (`r0 = 0; exit`) alone on \
                     {hook}: the hook's own cost"
                );
                self.rows.push(if samples.is_empty() {
                    vec![name, "no null program attached on this kernel".into()]
                } else {
                    row(&name, samples, 3)
                });
            }
        }
        if let (Some(rounds), Some(hook)) = (h.foreign_rounds, h.workload.watched_hook()) {
            self.rows.push(vec![
                format!(
                    "{l}: rounds whose bare runs had another process's program on `{hook}` \
                     (at a run's start or end: its cost then counts in bare too)"
                ),
                format!("{rounds} of {}", h.bound.len()),
            ]);
        }
        if let Some(p) = &h.peer {
            self.rows.push(row(
                &format!("{l}: peer bpftrace SYN_SENT map (same tracepoint), throughput / bare"),
                p,
                3,
            ));
        }
        if let Some(s) = Spread::of(&h.bound) {
            self.verdicts.push(verdict(
                &format!("{t} ≥ {TARGET_SUCCESS_RATIO}× bare, {l} (bpf_stats bound)"),
                s.median >= TARGET_SUCCESS_RATIO,
                format!(
                    "median {:.3} (statistics' cost of {stats} ns per run taken out)",
                    s.median
                ),
            ));
        }
    }

    /// The peer row when bpftrace is not installed.
    pub fn no_peer(&mut self) {
        self.rows.push(vec![
            format!("{}: peer bpftrace", Workload::TcpRst.label()),
            "skipped: bpftrace not installed".into(),
        ]);
    }

    pub fn refused(&mut self, plan: &Plan, refused: &Refusals) {
        self.rows.push(row(
            "refused TCP connects: throughput with the agent / bare",
            &refused.ratio,
            3,
        ));
        self.refusal_rows(plan, "TCP", "refused TCP connects", refused);
    }

    pub fn uds_refused(&mut self, plan: &Plan, refused: &Refusals) {
        self.refusal_rows(
            plan,
            "UDS",
            "refused UDS connects (absent path and stale socket file, half each)",
            refused,
        );
    }

    /// Agent CPU per refusal and whether the pod's incidents held every refusal.
    fn refusal_rows(&mut self, plan: &Plan, proto: &str, what: &str, refused: &Refusals) {
        self.rows.push(row(
            &format!("{what}: agent CPU per refusal (ns, schedstat)"),
            &refused.ns_per_refusal,
            0,
        ));
        self.rows.push(vec![
            format!("refused {proto} connects: the pod's incidents hold every refusal"),
            format!(
                "{} of {} rounds ({} refusals each)",
                refused.exact_rounds, plan.rounds, plan.connects
            ),
        ]);
        if let Some(s) = Spread::of(&refused.ns_per_refusal) {
            self.verdicts.push(verdict(
                &format!(
                    "{proto} refusals in a pod ≤ {TARGET_US_PER_REFUSAL} µs of agent CPU each, all in its incidents"
                ),
                s.median / 1e3 <= TARGET_US_PER_REFUSAL && refused.exact_rounds == plan.rounds,
                format!(
                    "median {:.3} µs, exact in {}/{} rounds",
                    s.median / 1e3,
                    refused.exact_rounds,
                    plan.rounds
                ),
            ));
        }
    }

    pub fn node_scale(&mut self, plan: &Plan, sc: &Scale) {
        self.rows.push(vec![
            format!(
                "node scale: {} pods (cgroups + pods file), 10 connects/s for {} s: agent CPU",
                plan.scale_pods,
                plan.scale.as_secs()
            ),
            format!("{:.2} % of a core", sc.cpu_percent),
        ]);
        self.rows.push(vec![
            "node scale: agent RSS now / peak".into(),
            format!("{:.1} MiB / {:.1} MiB", sc.rss_mib, sc.peak_mib),
        ]);
        self.verdicts.push(verdict(
            &format!(
                "node scale: CPU ≤ {TARGET_SCALE_CPU_PERCENT} %, peak RSS ≤ {TARGET_SCALE_RSS_MIB} MiB"
            ),
            sc.cpu_percent <= TARGET_SCALE_CPU_PERCENT && sc.peak_mib <= TARGET_SCALE_RSS_MIB,
            format!("{:.2} %, {:.1} MiB", sc.cpu_percent, sc.peak_mib),
        ));
    }

    /// Start-to-ready times (ms), without and with `plan.index_cgroups` more cgroups.
    pub fn start_up(&mut self, plan: &Plan, plain: &[f64], many: &[f64]) {
        self.rows.push(row("agent start to ready (ms)", plain, 0));
        self.rows.push(row(
            &format!(
                "agent start to ready with {} more cgroups (ms; the index walks them)",
                plan.index_cgroups
            ),
            many,
            0,
        ));
    }

    pub fn latency(&mut self, lat: &Latency) {
        match lat.percentiles() {
            Some((p50, p99, max)) => {
                self.rows.push(vec![
                    format!(
                        "detection latency, listener up → incident resolved in the API ({} races)",
                        lat.samples.len()
                    ),
                    format!("p50 {p50:.0} ms, p99 {p99:.0} ms, max {max:.0} ms"),
                ]);
                self.verdicts.push(verdict(
                    &format!(
                        "detection latency p99 ≤ reorder window ({REORDER_WINDOW_MS:.0} ms) + 100 ms"
                    ),
                    p99 <= REORDER_WINDOW_MS + 100.0 && lat.missed == 0,
                    format!(
                        "p99 {p99:.0} ms, {} races not resolved within 10 s",
                        lat.missed
                    ),
                ));
            }
            None => self.rows.push(vec![
                "detection latency".into(),
                format!("no race resolved ({} missed)", lat.missed),
            ]),
        }
    }

    /// The storm row: `secs` of refusals next to startup races measured as `lat`.
    pub fn storm(&mut self, secs: u64, lat: &Latency, storm: &Storm) {
        self.rows.push(vec![
            format!(
                "storm: one pod refusing as fast as it can for {secs} s: refusals, lost records"
            ),
            format!(
                "{} refusals ({} delivered + {} suppressed), {} lost",
                storm.refused, storm.delivered, storm.suppressed, storm.lost
            ),
        ]);
        self.rows.push(vec![
            "storm: agent CPU".into(),
            format!("{:.1} % of a core", storm.cpu_percent),
        ]);
        let detected = match lat.percentiles() {
            Some((p50, p99, _)) => format!("p50 {p50:.0} ms, p99 {p99:.0} ms"),
            None => "none resolved".into(),
        };
        self.rows.push(vec![
            format!(
                "storm: detection latency of the neighbour's races ({} races, {} missed)",
                lat.samples.len(),
                lat.missed
            ),
            detected.clone(),
        ]);
        self.verdicts.push(verdict(
            "storm: the flooder's refusals exact in `/metrics`, no record lost, every race resolved",
            storm.exact() && lat.missed == 0 && !lat.samples.is_empty(),
            format!(
                "{} of {} accounted, {} lost, {} missed, {detected}",
                storm.delivered + storm.suppressed,
                storm.refused,
                storm.lost,
                lat.missed
            ),
        ));
    }

    /// BENCHMARKS.md: machine, method, the figures, the verdicts and the notes.
    pub fn render(&self, plan: &Plan, parts: &Parts) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# Benchmarks\n");
        let _ = writeln!(
            s,
            "Generated by `cargo xtask bench{}{}` (as root); do not edit by hand. {}\n",
            if plan.smoke { " --smoke" } else { "" },
            parts.only_flag().unwrap_or_default(),
            if plan.smoke {
                "**Smoke run: too few samples to mean anything; it only proves the harness runs.**"
            } else {
                ""
            }
        );
        let _ = writeln!(s, "## Machine\n\n{}\n", machine());
        s.push_str(&method(plan));
        let rows: Vec<Vec<String>> = self.headline.iter().chain(&self.rows).cloned().collect();
        table(&mut s, &["figure", "min / **median** / max"], &rows);
        let _ = writeln!(s, "\n## Targets (issues #12, #23, #38 and #49)\n");
        table(&mut s, &["target", "measured", "verdict"], &self.verdicts);
        let _ = writeln!(s, "\n{}", HOOK_PATHS);
        let _ = writeln!(s, "\n{}", NOTES);
        let _ = writeln!(
            s,
            "\n## Fleet arithmetic (on paper)\n\n{}",
            fleet::section()
        );
        s
    }
}

/// How the agent's Unix hooks were set, and what `auto` attached.
fn hooks_label(hooks: UnixHooks, attached: Option<&str>) -> String {
    match (hooks, attached) {
        (UnixHooks::AsShipped, Some("missing")) => {
            "`--unix-hooks=auto`: no Unix hook on this kernel".into()
        }
        (UnixHooks::AsShipped, Some(a)) => format!("`--unix-hooks=auto`: `{a}` on this kernel"),
        (h, _) => format!("`--unix-hooks={}`", h.flag()),
    }
}

fn row(name: &str, samples: &[f64], digits: usize) -> Vec<String> {
    let shown = Spread::of(samples).map_or("no samples".into(), |s| s.show(digits));
    vec![name.into(), shown]
}

fn verdict(target: &str, holds: bool, measured: String) -> Vec<String> {
    vec![
        target.into(),
        measured,
        if holds { "holds" } else { "missed" }.into(),
    ]
}

fn table(s: &mut String, head: &[&str], rows: &[Vec<String>]) {
    let _ = writeln!(s, "| {} |", head.join(" | "));
    let _ = writeln!(s, "|{}", "---|".repeat(head.len()));
    for r in rows {
        let _ = writeln!(s, "| {} |", r.join(" | "));
    }
}
