//! The soak: the agent (`run`) watches pod churn for a while — simulated pods come and
//! go, some racing (the proxy listens late), some fixed (the proxy serves first) —
//! under a background refusal storm from one pod, and must neither grow nor lose
//! anything. `cargo xtask soak --minutes N` runs it with the release build; a 2-minute
//! run is in the test suite (tests/tests/soak.rs). Same code for both.
//!
//! With restarts (#33), the agent pins its kernel state (a bpffs of the soak's own)
//! and is stopped and started again every so often, in the middle of a race: every
//! racing pod must still have exactly one incident holding exactly the refusals its
//! app counted.

use std::{
    fmt::Write as _,
    path::Path,
    time::{Duration, Instant},
};

use sidecar_race_kit::{
    agent::RunAgent,
    pinned::PinnedPlace,
    pod::{Declared, SimPod, empty_pods_file, sibling_binary, write_pod_list},
    scenario::{CountedApp, app, app_done, proxy},
};

/// Growth allowed after warm-up, in percent of the warm-up value.
pub const MAX_GROWTH_PERCENT: f64 = 5.0;
/// Open descriptors move by one or two with HTTP connections being served; below this
/// many, a change is not growth.
const FD_SLACK: f64 = 2.0;
/// Pods alive at once; older ones are deleted as new ones start (a rollout).
const ALIVE: usize = 4;
const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// The storm pod dials a closed port this often.
const STORM_INTERVAL_MS: &str = "1";
/// A racing pod's proxy listens this late.
const RACE_DELAY_MS: &str = "600";
/// How long a racing pod's incident may take to show up resolved.
const INCIDENT_WAIT: Duration = Duration::from_secs(15);
/// Incidents the agent keeps: small, so the history is at its cap within the warm-up
/// and what grows after it is not the history filling (by design, up to its cap).
const HISTORY: &str = "32";
/// The newest racing pods whose incidents must still be in the API at the end (well
/// within the history).
const KEPT_AT_END: usize = 8;

/// One sample of the agent's process.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub at: Duration,
    pub rss_kib: u64,
    pub fds: u64,
}

/// What a soak saw, and whether each check held.
#[derive(Debug)]
pub struct SoakReport {
    pub duration: Duration,
    pub warm_up: Duration,
    pub samples: Vec<Sample>,
    pub racing_pods: usize,
    /// Racing pods whose resolved `startup` incident was in the API.
    pub incidents_found: usize,
    /// Racing pods with an incident of another phase or state, or none: `uid: what`.
    pub incidents_wrong: Vec<String>,
    pub fixed_pods: usize,
    /// Incidents of fixed pods (false incidents).
    pub false_incidents: Vec<String>,
    pub refusals_seen: Option<f64>,
    /// Records the full ring buffer could not take.
    pub events_lost: Option<f64>,
    /// Incidents in the API at the end that are not the soak's pods': the agent watches
    /// the whole node, and on a shared machine other tests' pods count against the same
    /// history and memory.
    pub other_incidents: usize,
    /// Agent stderr lines that tell of a panic.
    pub panics: Vec<String>,
    /// Agent restarts mid-race (SIGTERM, then a new agent adopting the pins).
    pub restarts: usize,
    /// Racing pods whose one incident did not hold exactly the refusals their app
    /// counted: `uid: agent's vs app's`.
    pub counts_wrong: Vec<String>,
}

impl SoakReport {
    /// (at warm-up end, at the end) medians of three samples of `f`.
    fn ends(&self, f: impl Fn(&Sample) -> u64) -> Option<(f64, f64)> {
        let after: Vec<f64> = self
            .samples
            .iter()
            .filter(|s| s.at >= self.warm_up)
            .map(|s| f(s) as f64)
            .collect();
        if after.len() < 6 {
            return None;
        }
        let median = |v: &[f64]| {
            let mut v = v.to_vec();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        Some((median(&after[..3]), median(&after[after.len() - 3..])))
    }

    fn growth_ok(&self, f: impl Fn(&Sample) -> u64, slack: f64) -> Option<bool> {
        self.ends(f)
            .map(|(start, end)| end - start <= (start * MAX_GROWTH_PERCENT / 100.0).max(slack))
    }

    /// Every check that failed, in words; empty when the soak passed.
    pub fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        match self.growth_ok(|s| s.rss_kib, 0.0) {
            Some(true) => {}
            Some(false) => out.push(format!(
                "RSS grew more than {MAX_GROWTH_PERCENT} % after warm-up"
            )),
            None => out.push("too few samples after warm-up".into()),
        }
        if self.growth_ok(|s| s.fds, FD_SLACK) == Some(false) {
            out.push(format!(
                "open file descriptors grew more than {MAX_GROWTH_PERCENT} % after warm-up"
            ));
        }
        if self.racing_pods == 0 {
            out.push("no racing pod ran".into());
        }
        if !self.incidents_wrong.is_empty() {
            out.push(format!(
                "racing pods without their resolved startup incident: {}",
                self.incidents_wrong.join("; ")
            ));
        }
        if !self.false_incidents.is_empty() {
            out.push(format!(
                "incidents of fixed pods: {}",
                self.false_incidents.join("; ")
            ));
        }
        if !self.counts_wrong.is_empty() {
            out.push(format!(
                "incidents not holding their app's refusals: {}",
                self.counts_wrong.join("; ")
            ));
        }
        if !self.panics.is_empty() {
            out.push(format!("the agent panicked: {}", self.panics.join(" | ")));
        }
        out
    }

    /// The summary table (Markdown).
    pub fn table(&self) -> String {
        let mut t = String::new();
        let mins = self.duration.as_secs_f64() / 60.0;
        let _ = writeln!(
            t,
            "Soak: {mins:.1} min, warm-up {} s, {} samples every {} s",
            self.warm_up.as_secs(),
            self.samples.len(),
            SAMPLE_EVERY.as_secs()
        );
        let _ = writeln!(t);
        let _ = writeln!(t, "| check | after warm-up | at the end | limit | result |");
        let _ = writeln!(t, "|---|---|---|---|---|");
        let verdict = |ok: Option<bool>| match ok {
            Some(true) => "ok",
            Some(false) => "FAIL",
            None => "no samples",
        };
        for (name, f, slack) in [
            (
                "agent RSS (KiB)",
                (|s: &Sample| s.rss_kib) as fn(&Sample) -> u64,
                0.0,
            ),
            ("open file descriptors", |s: &Sample| s.fds, FD_SLACK),
        ] {
            let (a, b) = self
                .ends(f)
                .map(|(a, b)| (format!("{a:.0}"), format!("{b:.0}")))
                .unwrap_or_else(|| ("-".into(), "-".into()));
            let _ = writeln!(
                t,
                "| {name} | {a} | {b} | +{MAX_GROWTH_PERCENT} % | {} |",
                verdict(self.growth_ok(f, slack))
            );
        }
        let _ = writeln!(
            t,
            "| racing pods with their resolved `startup` incident | | {} / {} | all | {} |",
            self.incidents_found,
            self.racing_pods,
            verdict(Some(
                self.incidents_wrong.is_empty() && self.racing_pods > 0
            ))
        );
        let _ = writeln!(
            t,
            "| racing pods whose incident holds exactly the app's refusals | | {} / {} | all | {} |",
            self.racing_pods - self.counts_wrong.len().min(self.racing_pods),
            self.racing_pods,
            verdict(Some(self.counts_wrong.is_empty() && self.racing_pods > 0))
        );
        let _ = writeln!(
            t,
            "| agent restarts mid-race (pinned state, checkpoint) | | {} | | |",
            self.restarts
        );
        let _ = writeln!(
            t,
            "| fixed pods with an incident | | {} / {} | 0 | {} |",
            self.false_incidents.len(),
            self.fixed_pods,
            verdict(Some(self.false_incidents.is_empty()))
        );
        let _ = writeln!(
            t,
            "| refusals the kernel saw (storm included) | | {} | | |",
            self.refusals_seen.map_or("-".into(), |r| format!("{r:.0}"))
        );
        let _ = writeln!(
            t,
            "| kernel events lost (full ring) | | {} | | |",
            self.events_lost.map_or("-".into(), |r| format!("{r:.0}"))
        );
        let _ = writeln!(
            t,
            "| incidents of pods not the soak's (a shared node) | | {} | | |",
            self.other_incidents
        );
        let _ = writeln!(
            t,
            "| panics in the agent's stderr | | {} | 0 | {} |",
            self.panics.len(),
            verdict(Some(self.panics.is_empty()))
        );
        t
    }
}

/// Reads the agent's RSS and open descriptors.
fn sample(pid: u32, at: Duration) -> Option<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some(Sample { at, rss_kib, fds })
}

/// Runs the soak for `duration` against the agent built next to this binary (see
/// [`sidecar_race_kit::agent::agent_binary`]), restarting it every `restart_every`;
/// the first quarter is warm-up.
pub fn run(duration: Duration, restart_every: Option<Duration>) -> SoakReport {
    let warm_up = duration / 4;
    let (pods_file, source) = empty_pods_file("soak");
    let place = restart_every.map(|_| PinnedPlace::new("soak"));
    // Deleted pods and removed cgroups are kept 20 s (not 10 min), and the history is
    // small, so the run reaches its steady state within the warm-up.
    let start_agent = || {
        let mut args: Vec<String> = [
            "--pods-from",
            &source,
            "--pods-poll-seconds",
            "0.2",
            "--grace-seconds",
            "20",
            "--incident-history",
            HISTORY,
        ]
        .map(String::from)
        .to_vec();
        args.extend(place.iter().flat_map(PinnedPlace::args));
        RunAgent::start(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let mut agent = start_agent();
    let started = Instant::now();
    let mut next_restart = restart_every.unwrap_or(Duration::MAX);
    let mut restarts = 0;
    let mut panics = Vec::new();
    let mut counts_wrong = Vec::new();

    // The storm: one pod dialing a port nobody opens, all along.
    let mut storm = SimPod::new("storm").expect("storm pod");
    let storm_app = storm.container("app").expect("storm container");
    let storm_uid = storm.uid.clone();
    app(
        &mut storm,
        &storm_app,
        &[
            "--connect",
            "127.0.0.1:9",
            "--interval-ms",
            STORM_INTERVAL_MS,
        ],
    );

    let mut manifests: Vec<(String, serde_json::Value)> = Vec::new();
    let mut alive: Vec<SimPod> = Vec::new();
    let mut racing: Vec<String> = Vec::new();
    let mut fixed: Vec<String> = Vec::new();
    let mut wrong = Vec::new();
    let mut samples = Vec::new();
    let mut next_sample = Duration::ZERO;
    let mut n = 0usize;
    while started.elapsed() < duration {
        if started.elapsed() >= next_sample {
            samples.extend(sample(agent.pid(), started.elapsed()));
            next_sample += SAMPLE_EVERY;
        }
        let races = n.is_multiple_of(2);
        let mut pod = SimPod::new(&format!("soak{n}")).expect("a simulated pod");
        let p = pod.container("proxy").expect("proxy container");
        let a = pod.container("app").expect("app container");
        let deployment = if races { "soak-racing" } else { "soak-fixed" };
        manifests.push((
            pod.uid.clone(),
            pod.app_and_proxy_manifest("soak", deployment, &a, &p, Declared::App),
        ));
        write_pod_list(
            &pods_file,
            &manifests.iter().map(|(_, m)| m.clone()).collect::<Vec<_>>(),
        );
        if races {
            proxy(
                &mut pod,
                &p,
                &["--listen", "127.0.0.1:15001", "--delay-ms", RACE_DELAY_MS],
            );
            let dialing = CountedApp::start(
                &mut pod,
                &a,
                &sibling_binary("sr-app"),
                &["--connect", "127.0.0.1:15001", "--interval-ms", "50"],
            );
            if started.elapsed() >= next_restart {
                // Mid-race: the app has been refused a few times, the proxy is not up.
                std::thread::sleep(Duration::from_millis(200));
                let log = agent.stop();
                panics.extend(log.into_iter().filter(|l| l.contains("panicked")));
                agent = start_agent();
                agent.wait_log(&["adopted the programs and maps"], INCIDENT_WAIT);
                restarts += 1;
                next_restart += restart_every.unwrap_or(Duration::MAX);
            }
            let refused = dialing.refused(&mut pod);
            let found = agent.wait_incidents(&pod.uid, INCIDENT_WAIT, |i| {
                i.iter().any(|i| i["state"] == "resolved")
                    && i.iter()
                        .map(|i| i["refused_count"].as_u64().unwrap_or(0))
                        .sum::<u64>()
                        >= refused
            });
            match found.as_slice() {
                [i] if i["phase"] == "startup" && i["state"] == "resolved" => {
                    if i["refused_count"].as_u64() != Some(refused) {
                        counts_wrong
                            .push(format!("{}: {} vs {refused}", pod.uid, i["refused_count"]));
                    }
                }
                other => wrong.push(format!(
                    "{}: {}",
                    pod.uid,
                    if other.is_empty() {
                        "no incident".to_string()
                    } else {
                        other
                            .iter()
                            .map(|i| format!("{} {}", i["phase"], i["state"]))
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                )),
            }
            racing.push(pod.uid.clone());
        } else {
            proxy(&mut pod, &p, &["--listen", "127.0.0.1:15001"]);
            // Serving first, as a native sidecar with a startupProbe makes it.
            std::thread::sleep(Duration::from_millis(300));
            app_done(
                &mut pod,
                &a,
                &["--connect", "127.0.0.1:15001", "--attempts", "1"],
            );
            fixed.push(pod.uid.clone());
        }
        alive.push(pod);
        if alive.len() > ALIVE {
            let gone = alive.remove(0);
            manifests.retain(|(uid, _)| *uid != gone.uid);
            drop(gone);
        }
        n += 1;
    }
    samples.extend(sample(agent.pid(), started.elapsed()));
    drop(alive);
    drop(storm);

    // Every racing pod's incident was checked right after its race; the newest must
    // still be in the API at the end, unchanged (not lost to churn or the storm).
    let all = agent.incidents("");
    let of = |uid: &str| -> Vec<&serde_json::Value> {
        all.iter().filter(|i| i["pod_uid"] == uid).collect()
    };
    for uid in racing.iter().rev().take(KEPT_AT_END) {
        let ok = of(uid)
            .iter()
            .any(|i| i["phase"] == "startup" && i["state"] == "resolved");
        if !ok && !wrong.iter().any(|w: &String| w.starts_with(uid.as_str())) {
            wrong.push(format!("{uid}: gone from the API by the end"));
        }
    }
    let false_incidents = fixed
        .iter()
        .flat_map(|uid| of(uid))
        .map(|i| format!("{} {} {}", i["pod_uid"], i["phase"], i["state"]))
        .collect();
    let metrics = sidecar_race_kit::http::get(&agent.addr, "/metrics")
        .map(|(_, body)| body)
        .unwrap_or_default();
    let metric = |series: &str| -> Option<f64> {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    };
    let refusals_seen = metric("sidecar_race_kernel_events_total{kind=\"refused\"}");
    let events_lost = metric("sidecar_race_kernel_events_lost_total");
    let ours: Vec<&String> = racing.iter().chain(&fixed).chain([&storm_uid]).collect();
    let other_incidents = all
        .iter()
        .filter(|i| !ours.iter().any(|u| i["pod_uid"] == u.as_str()))
        .count();
    let log = agent.stop();
    let _ = std::fs::remove_file(&pods_file);
    SoakReport {
        duration,
        warm_up,
        samples,
        incidents_found: racing.len() - wrong.len().min(racing.len()),
        racing_pods: racing.len(),
        incidents_wrong: wrong,
        fixed_pods: fixed.len(),
        false_incidents,
        refusals_seen,
        events_lost,
        other_incidents,
        panics: panics
            .into_iter()
            .chain(log.into_iter().filter(|l| l.contains("panicked")))
            .collect(),
        restarts,
        counts_wrong,
    }
}

/// Runs the soak, prints its table, writes it to `out` when given; an error names
/// every check that failed.
pub fn run_and_report(
    duration: Duration,
    restart_every: Option<Duration>,
    out: Option<&Path>,
) -> anyhow::Result<SoakReport> {
    let report = run(duration, restart_every);
    let table = report.table();
    println!("{table}");
    if let Some(path) = out {
        std::fs::write(path, &table)?;
    }
    let failures = report.failures();
    if !failures.is_empty() {
        anyhow::bail!("the soak failed:\n  - {}", failures.join("\n  - "));
    }
    Ok(report)
}
