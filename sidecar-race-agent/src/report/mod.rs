//! `sidecar-race-agent report`: which workloads suffer most from sidecar races, and
//! the fix for each, as evidence for prioritising their migration to native sidecars.
//!
//! Evidence comes from Prometheus (the agents' metrics over a range, [`prometheus`]) or
//! straight from agents (their `/api/v1/incidents`, [`agents`]); both fill the same
//! [`Fleet`], which [`build`] ranks and [`render`] prints.
//!
//! **Ranking.** Workloads with at least one incident, refusal or stuck Job pod,
//! ordered by affected pod starts (descending; an init container deadlocked on a
//! classic sidecar counts as an affected start), then Job pods kept running by a
//! sidecar, then startup incidents, then refused connections, then the worst
//! (largest) race-window p95; ties by namespace, kind and name. Workloads whose
//! refusals all come from `guarded` incidents (a wait tool such as `nc` or
//! `linkerd-await` was refused: the pod already works around the start order) rank
//! below every unguarded one, and within a workload guarded fixes come last; only
//! agents know the refused processes, so from Prometheus nothing is guarded.
//! Workloads whose only incidents are `unresolved` sidecar races come last whatever
//! their counts: nothing ever listened on the port, a misconfiguration, not a race, so
//! migrating the sidecar would not help them. `app_not_ready` findings (a sidecar
//! dialing an app that was not listening yet) are never evidence here.
//!
//! The fix sentences are the agent's own ([`crate::detect::advice`]): one piece of
//! code says what to do, here and on `/api/v1/incidents`.

pub mod agents;
pub mod client;
pub mod plan;
pub mod prometheus;
pub mod render;
pub mod via_api;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use thiserror::Error;

use crate::{
    catalog::CATALOG,
    detect::{
        Kind, Phase,
        advice::{Subject, advice, shows_workaround, workaround},
        processes::ProcessCount,
    },
    inventory::pod_info::Pattern,
};

/// Why a report could not be made. Each message is one sentence for the user.
#[derive(Debug, Error, PartialEq)]
pub enum ReportError {
    #[error("invalid {what} URL `{url}`: {reason}")]
    BadUrl {
        what: &'static str,
        url: String,
        reason: String,
    },
    #[error("invalid range `{0}`: expected a Prometheus duration such as 7d, 12h or 1h30m")]
    BadRange(String),
    #[error("cannot reach {what} at {url}: {reason}")]
    Unreachable {
        what: &'static str,
        url: String,
        reason: String,
    },
    #[error("{what} at {url} answered HTTP {status} to {path}: {body}")]
    Http {
        what: &'static str,
        url: String,
        path: String,
        status: u16,
        body: String,
    },
    #[error(
        "{what} at {url} answered {path} with more than {limit_mib} MiB, more than the report reads from one answer"
    )]
    TooLarge {
        what: &'static str,
        url: String,
        path: String,
        limit_mib: usize,
    },
    #[error("Prometheus at {url} rejected the query ({error_type}): {error}")]
    Prometheus {
        url: String,
        error_type: String,
        error: String,
    },
    #[error("{what} at {url} answered {path} with something unexpected: {reason}")]
    Malformed {
        what: &'static str,
        url: String,
        path: String,
        reason: String,
    },
    #[error(
        "Prometheus at {url} has no sidecar_race metrics in the last {range}: is it scraping the agents?"
    )]
    NoData { url: String, range: String },
    /// Reaching the agents through the API server's pod proxy failed.
    #[error("through the API server: {0}")]
    Api(String),
}

/// What to read the evidence from.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// A Prometheus base URL and a range in Prometheus duration syntax.
    Prometheus { url: String, range: String },
    /// Agents' base URLs (`http://node:9965`), and the bearer token to send them (agents
    /// run with `--auth kubernetes`).
    Agents {
        urls: Vec<String>,
        token: Option<String>,
    },
    /// Every agent pod of `namespace` (label `app.kubernetes.io/name=sidecar-race-agent`),
    /// through the API server's pod proxy on `port`, with the user's kubeconfig.
    AgentsViaApi {
        namespace: String,
        port: u16,
        token: Option<String>,
    },
}

/// Where a report's evidence came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    Prometheus { url: String, range: String },
    Agents { urls: Vec<String> },
}

/// A workload as the metrics label it; "" is unknown (no pod metadata).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkloadKey {
    pub namespace: String,
    pub kind: String,
    pub name: String,
}

/// Incidents of one sidecar, phase and pattern. Counts are f64: Prometheus'
/// `increase()` extrapolates.
#[derive(Debug, Clone, PartialEq)]
pub struct IncidentCount {
    /// `sidecar_race` or `init_deadlock` (never `app_not_ready`).
    pub kind: Kind,
    pub sidecar: String,
    pub phase: Phase,
    pub pattern: Pattern,
    pub count: f64,
}

/// Refused connections of one client container to one sidecar port, in one phase.
#[derive(Debug, Clone, PartialEq)]
pub struct RefusalCount {
    pub container: String,
    pub sidecar: String,
    pub port: u16,
    pub phase: Phase,
    pub count: f64,
    /// The refused processes, as incidents show them (none from Prometheus).
    pub processes: Vec<ProcessCount>,
    /// Every incident behind these refusals was `guarded`.
    pub guarded: bool,
}

/// What a source knows about one workload.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Evidence {
    /// `None` when the source cannot know (agents keep no pod-start history).
    pub pod_starts: Option<f64>,
    pub affected_pod_starts: f64,
    pub incidents: Vec<IncidentCount>,
    pub refusals: Vec<RefusalCount>,
    pub window_p50: Option<f64>,
    pub window_p95: Option<f64>,
    /// Job pods kept running by a classic sidecar, by sidecar name.
    pub stuck_job_pods: BTreeMap<String, f64>,
}

/// Everything a source collected, before ranking.
#[derive(Debug, Clone, PartialEq)]
pub struct Fleet {
    pub source: Source,
    pub workloads: BTreeMap<WorkloadKey, Evidence>,
}

/// The report, as `--format json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub source: Source,
    /// Workloads with evidence, before `--top`.
    pub workloads_total: usize,
    /// Workloads that started pods in the range without any incident (`null` from agents).
    pub workloads_without_incidents: Option<usize>,
    pub workloads: Vec<WorkloadReport>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkloadReport {
    pub rank: usize,
    pub namespace: Option<String>,
    pub workload_kind: Option<String>,
    pub workload: Option<String>,
    pub sidecars: Vec<SidecarReport>,
    pub pod_starts: Option<u64>,
    pub affected_pod_starts: u64,
    /// affected / starts, 0..1; `null` when starts are unknown or zero.
    pub affected_share: Option<f64>,
    pub incidents: u64,
    pub startup_incidents: u64,
    /// Job pods whose app containers finished while a classic sidecar kept them running.
    pub stuck_job_pods: u64,
    pub refusals: u64,
    pub race_window_p50_seconds: Option<f64>,
    pub race_window_p95_seconds: Option<f64>,
    pub phases: Vec<Phase>,
    /// Only `unresolved` incidents: a misconfiguration, not a race.
    pub misconfiguration: bool,
    /// Every refusal came from a `guarded` incident: the pod works around the order.
    pub guarded: bool,
    pub fixes: Vec<Fix>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SidecarReport {
    pub name: Option<String>,
    pub pattern: Pattern,
    pub phases: Vec<Phase>,
    pub incidents: u64,
}

/// One fix: for a client container refused on a sidecar port in a phase.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fix {
    pub kind: Kind,
    pub phase: Phase,
    pub sidecar: Option<String>,
    pub pattern: Pattern,
    pub container: Option<String>,
    /// The refused port (`null` for a stuck Job).
    pub port: Option<u16>,
    pub refusals: u64,
    /// The refused processes by name, most refused first (8, then `(other)`).
    pub processes: Vec<ProcessCount>,
    /// Its incidents were `guarded`: a wait tool already holds the client back.
    pub guarded: bool,
    /// The sidecar to move to `initContainers` with `restartPolicy: Always`, when the
    /// fix includes that (for tools; the sentence in `advice` says the same).
    pub move_to_init_containers: Option<String>,
    /// The port the sidecar's startupProbe must test, when the fix includes a probe.
    pub startup_probe_port: Option<u16>,
    /// The agent's advice sentence.
    pub advice: String,
}

/// Reads the evidence from `input`.
pub async fn collect(input: &Input) -> Result<Fleet, ReportError> {
    match input {
        Input::Prometheus { url, range } => prometheus::collect(url, range).await,
        Input::Agents { urls, token } => agents::collect(urls, token.as_deref()).await,
        Input::AgentsViaApi {
            namespace,
            port,
            token,
        } => via_api::collect(namespace, *port, token.as_deref()).await,
    }
}

/// Ranks the workloads with evidence (see the module doc) and keeps the first `top`.
pub fn build(fleet: Fleet, top: Option<usize>) -> Report {
    let mut without = 0;
    let mut workloads: Vec<WorkloadReport> = Vec::new();
    for (key, ev) in &fleet.workloads {
        match workload(key, ev) {
            Some(w) => workloads.push(w),
            None if ev.pod_starts.is_some_and(|s| s > 0.0) => without += 1,
            None => {}
        }
    }
    workloads.sort_by(|a, b| {
        a.misconfiguration
            .cmp(&b.misconfiguration)
            .then(a.guarded.cmp(&b.guarded))
            .then(b.affected_pod_starts.cmp(&a.affected_pod_starts))
            .then(b.stuck_job_pods.cmp(&a.stuck_job_pods))
            .then(b.startup_incidents.cmp(&a.startup_incidents))
            .then(b.refusals.cmp(&a.refusals))
            .then(p95(b).total_cmp(&p95(a)))
            .then_with(|| name_order(a).cmp(&name_order(b)))
    });
    let total = workloads.len();
    workloads.truncate(top.unwrap_or(usize::MAX));
    for (i, w) in workloads.iter_mut().enumerate() {
        w.rank = i + 1;
    }
    let knows_starts = matches!(fleet.source, Source::Prometheus { .. });
    Report {
        source: fleet.source,
        workloads_total: total,
        workloads_without_incidents: knows_starts.then_some(without),
        workloads,
    }
}

fn p95(w: &WorkloadReport) -> f64 {
    w.race_window_p95_seconds.unwrap_or(-1.0)
}

fn name_order(w: &WorkloadReport) -> (&Option<String>, &Option<String>, &Option<String>) {
    (&w.namespace, &w.workload_kind, &w.workload)
}

/// Counts are whole in reality; `increase()`'s extrapolation is not evidence.
fn whole(x: f64) -> u64 {
    x.max(0.0).round() as u64
}

/// A label value, `None` when the agent did not know it ("" from older agents).
fn known(s: &str) -> Option<String> {
    (!s.is_empty() && s != "unknown").then(|| s.to_string())
}

/// One workload's line, or `None` without any incident or refusal in the range.
fn workload(key: &WorkloadKey, ev: &Evidence) -> Option<WorkloadReport> {
    let incidents: Vec<&IncidentCount> = ev.incidents.iter().filter(|i| i.count > 0.0).collect();
    let refusals: Vec<&RefusalCount> = ev.refusals.iter().filter(|r| r.count > 0.0).collect();
    let stuck: Vec<(&String, u64)> = ev
        .stuck_job_pods
        .iter()
        .map(|(sidecar, n)| (sidecar, whole(*n)))
        .filter(|(_, n)| *n > 0)
        .collect();
    if incidents.is_empty() && refusals.is_empty() && stuck.is_empty() {
        return None;
    }
    let phases: BTreeSet<Phase> = incidents
        .iter()
        .map(|i| i.phase)
        .chain(refusals.iter().map(|r| r.phase))
        .collect();
    let sum = |phase: Option<Phase>| {
        incidents
            .iter()
            .filter(|i| phase.is_none_or(|p| i.phase == p))
            .map(|i| i.count)
            .sum::<f64>()
    };
    let affected = whole(ev.affected_pod_starts);
    let starts = ev.pod_starts.map(whole);
    Some(WorkloadReport {
        rank: 0,
        namespace: known(&key.namespace),
        workload_kind: known(&key.kind),
        workload: known(&key.name),
        sidecars: sidecars(&incidents),
        pod_starts: starts,
        affected_pod_starts: affected,
        affected_share: starts
            .filter(|s| *s > 0)
            .map(|s| (affected as f64 / s as f64).min(1.0)),
        incidents: whole(sum(None)),
        startup_incidents: whole(sum(Some(Phase::Startup))),
        // Counts from a source are not trusted to be small: sums saturate.
        stuck_job_pods: stuck.iter().fold(0, |sum, (_, n)| sum.saturating_add(*n)),
        refusals: whole(refusals.iter().map(|r| r.count).sum()),
        race_window_p50_seconds: ev.window_p50,
        race_window_p95_seconds: ev.window_p95,
        misconfiguration: stuck.is_empty()
            && incidents.iter().all(|i| i.kind == Kind::SidecarRace)
            && phases.iter().all(|p| *p == Phase::Unresolved),
        phases: phases.into_iter().collect(),
        guarded: stuck.is_empty() && !refusals.is_empty() && refusals.iter().all(|r| r.guarded),
        fixes: fixes(&incidents, &refusals)
            .into_iter()
            .chain(stuck.iter().map(|(sidecar, _)| stuck_job_fix(sidecar)))
            .collect(),
    })
}

/// The sidecars by (name, pattern): a sidecar migrated within the range shows twice.
fn sidecars(incidents: &[&IncidentCount]) -> Vec<SidecarReport> {
    let mut by: BTreeMap<(&str, &'static str), (Pattern, BTreeSet<Phase>, f64)> = BTreeMap::new();
    for i in incidents {
        let e =
            by.entry((&i.sidecar, i.pattern.as_str()))
                .or_insert((i.pattern, BTreeSet::new(), 0.0));
        e.1.insert(i.phase);
        e.2 += i.count;
    }
    let mut out: Vec<SidecarReport> = by
        .into_iter()
        .map(|((name, _), (pattern, phases, count))| SidecarReport {
            name: known(name),
            pattern,
            phases: phases.into_iter().collect(),
            incidents: whole(count),
        })
        .collect();
    out.sort_by_key(|s| std::cmp::Reverse(s.incidents));
    out
}

/// One fix per (phase, sidecar, pattern, client container, port): incidents say the
/// pattern, refusals (same sidecar and phase) say who dialed which port.
fn fixes(incidents: &[&IncidentCount], refusals: &[&RefusalCount]) -> Vec<Fix> {
    let mut out: BTreeMap<(Kind, Phase, &str, &'static str, &str, u16), Fix> = BTreeMap::new();
    for i in incidents {
        for r in refusals
            .iter()
            .filter(|r| r.sidecar == i.sidecar && r.phase == i.phase)
        {
            out.entry((
                i.kind,
                i.phase,
                &i.sidecar,
                i.pattern.as_str(),
                &r.container,
                r.port,
            ))
            .or_insert_with(|| fix(i, r))
            .add_refusals(whole(r.count));
        }
    }
    let mut fixes: Vec<Fix> = out.into_values().collect();
    fixes.sort_by(|a, b| {
        (a.guarded.cmp(&b.guarded))
            .then(a.phase.cmp(&b.phase))
            .then(b.refusals.cmp(&a.refusals))
    });
    fixes
}

impl Fix {
    fn add_refusals(&mut self, n: u64) {
        self.refusals = self.refusals.saturating_add(n);
    }
}

fn fix(i: &IncidentCount, r: &RefusalCount) -> Fix {
    let (kind, phase, pattern, port) = (i.kind, i.phase, i.pattern, r.port);
    let sidecar = known(&i.sidecar);
    let container = known(&r.container);
    // Mirrors advice()'s decision table for tools; a test holds the two together.
    // An init container before a native sidecar: it is in initContainers already.
    let native = matches!(pattern, Pattern::Native | Pattern::NativeProbed);
    let moves = (kind == Kind::InitDeadlock && !native)
        || matches!(
            (phase, pattern),
            (Phase::Startup, Pattern::Classic | Pattern::Unknown)
                | (Phase::Drain, Pattern::Classic)
        );
    let subject = Subject {
        kind,
        phase,
        pattern,
        container: container.as_deref(),
        sidecar: sidecar.as_deref(),
        port,
        dialed_port: None,
        // Neither the metrics nor the incidents say what the probe tests.
        startup_probe: None,
        roles_known: true,
        client_is_sidecar: false,
        listening_on: None,
        dialed: None,
        socket: None,
    };
    let mut advice_text = advice(&subject);
    if r.guarded && shows_workaround(kind, phase) {
        let tool = (r.processes.iter())
            .map(|p| p.name.as_str())
            .find(|name| CATALOG.is_wait_tool(name))
            .unwrap_or("a wait tool");
        advice_text.push_str(&workaround(tool, sidecar.as_deref(), &subject));
    }
    Fix {
        advice: advice_text,
        move_to_init_containers: sidecar.clone().filter(|_| moves),
        startup_probe_port: (phase == Phase::Startup || kind == Kind::InitDeadlock).then_some(port),
        kind,
        phase,
        sidecar,
        pattern,
        container,
        port: Some(port),
        refusals: 0,
        processes: r.processes.clone(),
        guarded: r.guarded,
    }
}

/// The fix for Job pods kept running by classic sidecar `sidecar`.
fn stuck_job_fix(sidecar: &str) -> Fix {
    let sidecar = known(sidecar);
    Fix {
        advice: advice(&Subject {
            kind: Kind::StuckJob,
            phase: Phase::Drain,
            pattern: Pattern::Classic,
            container: None,
            sidecar: sidecar.as_deref(),
            port: 0,
            dialed_port: None,
            startup_probe: None,
            roles_known: true,
            client_is_sidecar: false,
            listening_on: None,
            dialed: None,
            socket: None,
        }),
        kind: Kind::StuckJob,
        phase: Phase::Drain,
        move_to_init_containers: sidecar.clone(),
        startup_probe_port: None,
        sidecar,
        pattern: Pattern::Classic,
        container: None,
        port: None,
        refusals: 0,
        processes: Vec::new(),
        guarded: false,
    }
}

/// An incident kind label; older agents had none (sidecar races only).
pub fn parse_kind(s: &str) -> Option<Kind> {
    match s {
        "" => Some(Kind::SidecarRace),
        other => Kind::parse(other),
    }
}

pub fn parse_pattern(s: &str) -> Pattern {
    match s {
        "classic" => Pattern::Classic,
        "native" => Pattern::Native,
        "native_probed" => Pattern::NativeProbed,
        _ => Pattern::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source answering absurd counts (a broken exporter, a hostile endpoint) gets a
    /// report with saturated numbers, not a panic.
    #[test]
    fn huge_counts_saturate_instead_of_overflowing() {
        let ev = Evidence {
            incidents: vec![inc("istio-proxy", Phase::Startup, Pattern::Classic, 1e300)],
            refusals: vec![
                refused("istio-proxy", Phase::Startup, 15001, 1e300),
                refused("istio-proxy", Phase::Startup, 15001, f64::INFINITY),
            ],
            stuck_job_pods: [("a".to_string(), 1e300), ("b".to_string(), 1e300)].into(),
            ..Evidence::default()
        };
        let fleet = Fleet {
            source: Source::Agents { urls: vec![] },
            workloads: [(key("checkout"), ev)].into(),
        };
        let r = build(fleet, None);
        let w = &r.workloads[0];
        assert_eq!(w.stuck_job_pods, u64::MAX);
        assert_eq!(w.fixes[0].refusals, u64::MAX);
        assert_eq!(w.incidents, u64::MAX);
    }

    fn key(name: &str) -> WorkloadKey {
        WorkloadKey {
            namespace: "shop".into(),
            kind: "Deployment".into(),
            name: name.into(),
        }
    }

    fn inc(sidecar: &str, phase: Phase, pattern: Pattern, count: f64) -> IncidentCount {
        IncidentCount {
            kind: Kind::SidecarRace,
            sidecar: sidecar.into(),
            phase,
            pattern,
            count,
        }
    }

    fn refused(sidecar: &str, phase: Phase, port: u16, count: f64) -> RefusalCount {
        RefusalCount {
            container: "app".into(),
            sidecar: sidecar.into(),
            port,
            phase,
            count,
            processes: Vec::new(),
            guarded: false,
        }
    }

    fn fleet(workloads: Vec<(WorkloadKey, Evidence)>) -> Fleet {
        Fleet {
            source: Source::Prometheus {
                url: "http://p".into(),
                range: "7d".into(),
            },
            workloads: workloads.into_iter().collect(),
        }
    }

    #[test]
    fn stuck_jobs_and_init_deadlocks_rank_as_evidence_not_misconfiguration() {
        let deadlock = Evidence {
            affected_pod_starts: 2.0,
            incidents: vec![IncidentCount {
                kind: Kind::InitDeadlock,
                ..inc("cloud-sql-proxy", Phase::Unresolved, Pattern::Classic, 2.0)
            }],
            refusals: vec![refused("cloud-sql-proxy", Phase::Unresolved, 5432, 40.0)],
            ..Evidence::default()
        };
        let stuck = Evidence {
            stuck_job_pods: [("cloud-sql-proxy".to_string(), 3.0)].into(),
            ..Evidence::default()
        };
        let unresolved = Evidence {
            incidents: vec![inc("proxy", Phase::Unresolved, Pattern::Classic, 9.0)],
            refusals: vec![refused("proxy", Phase::Unresolved, 9, 90.0)],
            ..Evidence::default()
        };
        let r = build(
            fleet(vec![
                (key("typo"), unresolved),
                (key("nightly"), stuck),
                (key("migrate"), deadlock),
            ]),
            None,
        );
        let names: Vec<&str> = r
            .workloads
            .iter()
            .map(|w| w.workload.as_deref().unwrap())
            .collect();
        assert_eq!(names, ["migrate", "nightly", "typo"]);
        let (migrate, nightly) = (&r.workloads[0], &r.workloads[1]);
        assert!(!migrate.misconfiguration && !nightly.misconfiguration);
        assert!(r.workloads[2].misconfiguration);
        assert_eq!(migrate.fixes[0].kind, Kind::InitDeadlock);
        assert_eq!(
            migrate.fixes[0].move_to_init_containers.as_deref(),
            Some("cloud-sql-proxy")
        );
        assert!(
            migrate.fixes[0].advice.contains("a deadlock"),
            "{}",
            migrate.fixes[0].advice
        );
        assert_eq!(nightly.stuck_job_pods, 3);
        assert_eq!(nightly.fixes[0].kind, Kind::StuckJob);
        assert_eq!(nightly.fixes[0].port, None);
        assert!(nightly.fixes[0].advice.contains("never completes"));
    }

    #[test]
    fn ranks_by_affected_then_startup_then_refusals_then_p95_unresolved_last() {
        let ev = |affected: f64, startup: f64, refusals: f64, p95: f64| Evidence {
            pod_starts: Some(100.0),
            affected_pod_starts: affected,
            incidents: vec![inc("proxy", Phase::Startup, Pattern::Classic, startup)],
            refusals: vec![refused("proxy", Phase::Startup, 15001, refusals)],
            window_p50: None,
            window_p95: Some(p95),
            stuck_job_pods: BTreeMap::new(),
        };
        let unresolved = Evidence {
            affected_pod_starts: 0.0,
            incidents: vec![inc("proxy", Phase::Unresolved, Pattern::Classic, 50.0)],
            refusals: vec![refused("proxy", Phase::Unresolved, 9, 500.0)],
            ..Evidence::default()
        };
        let quiet = Evidence {
            pod_starts: Some(10.0),
            ..Evidence::default()
        };
        let r = build(
            fleet(vec![
                (key("a"), ev(1.0, 9.0, 9.0, 9.0)),
                (key("b"), ev(2.0, 1.0, 1.0, 1.0)),
                (key("c"), ev(1.0, 9.0, 10.0, 1.0)),
                (key("d"), ev(1.0, 9.0, 10.0, 2.0)),
                (key("e"), unresolved),
                (key("f"), quiet),
            ]),
            None,
        );
        let names: Vec<&str> = r
            .workloads
            .iter()
            .map(|w| w.workload.as_deref().unwrap())
            .collect();
        assert_eq!(names, ["b", "d", "c", "a", "e"]);
        assert_eq!(r.workloads_total, 5);
        assert_eq!(r.workloads_without_incidents, Some(1));
        assert!(r.workloads[4].misconfiguration);
        assert_eq!(r.workloads[0].rank, 1);
        assert_eq!(r.workloads[0].affected_share, Some(0.02));
        let top = build(fleet(vec![(key("a"), ev(1.0, 1.0, 1.0, 1.0))]), Some(0));
        assert_eq!((top.workloads.len(), top.workloads_total), (0, 1));
    }

    #[test]
    fn fixes_join_incidents_with_refusals_and_follow_the_advice() {
        let ev = Evidence {
            incidents: vec![
                inc("istio-proxy", Phase::Startup, Pattern::Classic, 3.0),
                inc("istio-proxy", Phase::Drain, Pattern::Classic, 1.0),
            ],
            refusals: vec![
                refused("istio-proxy", Phase::Startup, 15001, 12.0),
                refused("istio-proxy", Phase::Drain, 15001, 2.0),
            ],
            ..Evidence::default()
        };
        let w = workload(&key("checkout"), &ev).unwrap();
        assert_eq!(w.fixes.len(), 2);
        let startup = &w.fixes[0];
        assert_eq!(startup.phase, Phase::Startup);
        assert_eq!(startup.refusals, 12);
        assert_eq!(
            startup.move_to_init_containers.as_deref(),
            Some("istio-proxy")
        );
        assert_eq!(startup.startup_probe_port, Some(15001));
        assert!(
            startup
                .advice
                .starts_with("Move istio-proxy from containers")
        );
        assert_eq!(w.sidecars.len(), 1);
        assert_eq!(w.sidecars[0].phases, [Phase::Startup, Phase::Drain]);
        assert_eq!(w.phases, [Phase::Startup, Phase::Drain]);
    }

    /// The structured fields say what the sentence says, for every phase and pattern.
    #[test]
    fn structured_fix_agrees_with_the_sentence() {
        let phases = [
            Phase::Startup,
            Phase::Drain,
            Phase::Steady,
            Phase::Unresolved,
        ];
        let patterns = [
            Pattern::Classic,
            Pattern::Native,
            Pattern::NativeProbed,
            Pattern::Unknown,
        ];
        for phase in phases {
            for pattern in patterns {
                let f = fix(
                    &inc("proxy", phase, pattern, 1.0),
                    &refused("proxy", phase, 15001, 1.0),
                );
                let says_move = f.advice.contains("initContainers");
                assert_eq!(
                    f.move_to_init_containers.is_some(),
                    says_move,
                    "{phase:?} {pattern:?}: {}",
                    f.advice
                );
                if f.startup_probe_port.is_some() {
                    assert!(f.advice.contains("port 15001"), "{}", f.advice);
                    assert!(f.advice.contains("startupProbe"), "{}", f.advice);
                }
            }
        }
    }

    #[test]
    fn guarded_workloads_rank_below_unguarded_ones_and_guarded_fixes_come_last() {
        let guarded = |container: &str, phase: Phase, n: f64| RefusalCount {
            container: container.into(),
            processes: vec![ProcessCount {
                name: "nc".into(),
                count: n as u64,
            }],
            guarded: true,
            ..refused("proxy", phase, 15001, n)
        };
        // Most affected starts, but every refusal was a wait tool's.
        let waits = Evidence {
            affected_pod_starts: 5.0,
            incidents: vec![inc("proxy", Phase::Startup, Pattern::Classic, 5.0)],
            refusals: vec![guarded("wait", Phase::Startup, 40.0)],
            ..Evidence::default()
        };
        let plain = Evidence {
            affected_pod_starts: 1.0,
            incidents: vec![inc("proxy", Phase::Startup, Pattern::Classic, 1.0)],
            refusals: vec![refused("proxy", Phase::Startup, 15001, 3.0)],
            ..Evidence::default()
        };
        // A guarded startup and an unguarded drain: unguarded evidence, fixes reordered.
        let mixed = Evidence {
            affected_pod_starts: 2.0,
            incidents: vec![
                inc("proxy", Phase::Startup, Pattern::Classic, 2.0),
                inc("proxy", Phase::Drain, Pattern::Classic, 1.0),
            ],
            refusals: vec![
                guarded("wait", Phase::Startup, 9.0),
                refused("proxy", Phase::Drain, 15001, 1.0),
            ],
            ..Evidence::default()
        };
        let r = build(
            fleet(vec![
                (key("waits"), waits),
                (key("plain"), plain),
                (key("mixed"), mixed),
            ]),
            None,
        );
        let order: Vec<(&str, bool)> = r
            .workloads
            .iter()
            .map(|w| (w.workload.as_deref().unwrap(), w.guarded))
            .collect();
        assert_eq!(order, [("mixed", false), ("plain", false), ("waits", true)]);
        let mixed = &r.workloads[0];
        let phases: Vec<(Phase, bool)> = mixed.fixes.iter().map(|f| (f.phase, f.guarded)).collect();
        assert_eq!(phases, [(Phase::Drain, false), (Phase::Startup, true)]);
        let startup = &mixed.fixes[1];
        assert_eq!(startup.processes[0].name, "nc");
        assert!(
            startup
                .advice
                .contains("The pod works around the start order: nc waits until port 15001"),
            "{}",
            startup.advice
        );
        assert!(!mixed.fixes[0].advice.contains("works around"));
    }

    #[test]
    fn zero_counts_are_no_evidence() {
        let ev = Evidence {
            pod_starts: Some(5.0),
            incidents: vec![inc("proxy", Phase::Startup, Pattern::Classic, 0.0)],
            ..Evidence::default()
        };
        assert!(workload(&key("x"), &ev).is_none());
    }
}
