//! Evidence straight from agents: their `/api/v1/incidents` (each agent's history,
//! bounded by `--incident-history`). Agents keep no pod-start counts, so the share of
//! starts affected is unknown here; the rest comes from the incidents themselves.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use super::{
    client::Endpoint,
    error::ReportError,
    fleet::{
        Evidence, Fleet, IncidentCount, RefusalCount, Source, WorkloadKey, parse_kind,
        parse_pattern,
    },
};
use crate::{
    api::{Page, all_incidents_path},
    detect::{
        Kind, Phase,
        processes::{ProcessCount, ranked},
    },
};

/// The fields of an incident (docs/reference.md, "HTTP endpoints") the report uses:
/// the counts for the ranking, and for the html page's top incidents their pod, times
/// and timeline.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct AgentIncident {
    /// The agent's number for it (0 from a source that gives none).
    #[serde(default)]
    pub id: u64,
    /// `open` or `resolved`.
    #[serde(default)]
    pub state: String,
    #[serde(default)]
    pub pod: Option<String>,
    /// Absent from older agents: sidecar races only.
    #[serde(default)]
    pub kind: String,
    pub phase: String,
    pub pod_uid: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub workload: Option<WorkloadRef>,
    #[serde(default)]
    pub container: Option<String>,
    #[serde(default)]
    pub sidecar: Option<String>,
    #[serde(default)]
    pub pattern: String,
    /// `null` for a stuck Job and a Unix socket incident.
    #[serde(default)]
    pub port: Option<u16>,
    pub refused_count: u64,
    #[serde(default)]
    pub race_window_seconds: Option<f64>,
    /// Absent from older agents.
    #[serde(default)]
    pub processes: Vec<ProcessCount>,
    #[serde(default)]
    pub guarded: bool,
    /// `created` or `restarted_in_place` (KEP-5532); absent from older agents.
    #[serde(default)]
    pub pod_start: Option<String>,
    /// RFC 3339; the html page places the incident's race window in time by it.
    #[serde(default)]
    pub first_refused_at: Option<String>,
    /// What the agent saw in the pod (docs/reference.md, "The timeline"); empty from
    /// older agents and for a stuck Job.
    #[serde(default)]
    pub timeline: Vec<TimelineEntry>,
}

/// One entry of an incident's timeline, as the API gives it; the fields its kind lacks
/// are absent. Kinds are kept as text: a kind a newer agent adds is shown, not refused.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct TimelineEntry {
    pub kind: String,
    /// RFC 3339, ns.
    pub at: String,
    #[serde(default)]
    pub container: Option<String>,
    /// Refusal entries: the refusals since the previous entry; `dropped`: the entries
    /// left out.
    #[serde(default)]
    pub count: Option<u64>,
    /// `dropped`: the refusals the entries left out counted.
    #[serde(default)]
    pub refused: Option<u64>,
    #[serde(default)]
    pub grace_seconds: Option<i64>,
    #[serde(default)]
    pub value: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct WorkloadRef {
    pub kind: String,
    pub name: String,
}

/// Reads every agent's incidents (all of them, or the first failure), sending `token`
/// as a bearer token when given.
pub async fn collect(urls: &[String], token: Option<&str>) -> Result<Fleet, ReportError> {
    let (unique, incidents) = read(urls, token).await?;
    Ok(fleet(unique, incidents))
}

/// Every agent's incidents, and the agents' URLs without repeats (the source's names).
pub async fn read(
    urls: &[String],
    token: Option<&str>,
) -> Result<(Vec<String>, Vec<AgentIncident>), ReportError> {
    let mut unique: Vec<String> = Vec::new();
    for u in urls {
        if !unique.contains(u) {
            unique.push(u.clone());
        }
    }
    let lists = futures::future::try_join_all(unique.iter().map(|u| incidents(u, token))).await?;
    Ok((unique, lists.into_iter().flatten().collect()))
}

async fn incidents(url: &str, token: Option<&str>) -> Result<Vec<AgentIncident>, ReportError> {
    let ep = Endpoint::with_token("agent", url, token)?;
    let path = all_incidents_path();
    let answer = ep.get(&path).await?;
    if !(200..300).contains(&answer.status) {
        return Err(ep.http_error(&path, &answer));
    }
    parse(url, &answer.body)
}

/// An agent's `/api/v1/incidents` answer; `url` names the agent in errors.
pub fn parse(url: &str, body: &str) -> Result<Vec<AgentIncident>, ReportError> {
    let list: Page<Vec<AgentIncident>> =
        serde_json::from_str(body).map_err(|e| ReportError::Malformed {
            what: "agent",
            url: url.to_string(),
            path: all_incidents_path(),
            reason: format!("not an incident list ({e})"),
        })?;
    if list.truncated {
        eprintln!(
            "warning: agent {url} holds more incidents than one answer carries; the report uses its newest {}",
            list.incidents.len()
        );
    }
    Ok(list.incidents)
}

/// Groups incidents by workload: counts per (sidecar, phase, pattern) and per
/// (container, sidecar, port, phase) with the refused processes summed (guarded when
/// all its incidents are), affected pod starts = distinct pods with a startup incident,
/// a pod's in-place restarts (all as one) apart from its creation, window quantiles by
/// nearest rank.
pub fn fleet(urls: Vec<String>, incidents: impl IntoIterator<Item = AgentIncident>) -> Fleet {
    #[derive(Default)]
    struct Acc {
        incidents: BTreeMap<(Kind, String, Phase, String), f64>,
        refusals: BTreeMap<(String, String, u16, Phase), Refused>,
        /// (pod uid, `pod_start`): a pod restarted in place starts again.
        affected: BTreeSet<(String, Option<String>)>,
        windows: Vec<f64>,
        stuck: BTreeMap<String, BTreeSet<String>>,
    }
    let mut by: BTreeMap<WorkloadKey, Acc> = BTreeMap::new();
    for i in incidents {
        let (Some(phase), Some(kind)) = (Phase::parse(&i.phase), parse_kind(&i.kind)) else {
            continue; // a phase or kind of a newer agent: no advice for it here
        };
        if !kind.is_migration_evidence() {
            continue;
        }
        let key = WorkloadKey {
            cluster: String::new(),
            namespace: i.namespace.unwrap_or_default(),
            kind: i
                .workload
                .as_ref()
                .map(|w| w.kind.clone())
                .unwrap_or_default(),
            name: i.workload.map(|w| w.name).unwrap_or_default(),
        };
        let acc = by.entry(key).or_default();
        let sidecar = i.sidecar.unwrap_or_default();
        if kind == Kind::StuckJob {
            acc.stuck.entry(sidecar).or_default().insert(i.pod_uid);
            continue;
        }
        *acc.incidents
            .entry((kind, sidecar.clone(), phase, i.pattern))
            .or_default() += 1.0;
        // A Unix socket incident (no port) ranks its workload by its incidents, pods
        // and windows; the per-port refusal rows are for ports.
        if let Some(port) = i.port {
            let refused = acc
                .refusals
                .entry((i.container.unwrap_or_default(), sidecar, port, phase))
                .or_default();
            refused.count += i.refused_count as f64;
            refused.processes.extend(i.processes);
            refused.incidents += 1;
            refused.guarded += u64::from(i.guarded);
        }
        if phase == Phase::Startup || kind == Kind::InitDeadlock {
            acc.affected.insert((i.pod_uid, i.pod_start));
        }
        acc.windows
            .extend(i.race_window_seconds.filter(|w| w.is_finite()));
    }
    let workloads = by
        .into_iter()
        .map(|(key, mut acc)| {
            acc.windows.sort_by(f64::total_cmp);
            let ev = Evidence {
                pod_starts: None,
                affected_pod_starts: acc.affected.len() as f64,
                incidents: acc
                    .incidents
                    .into_iter()
                    .map(|((kind, sidecar, phase, pattern), count)| IncidentCount {
                        kind,
                        sidecar,
                        phase,
                        pattern: parse_pattern(&pattern),
                        count,
                    })
                    .collect(),
                refusals: acc
                    .refusals
                    .into_iter()
                    .map(|((container, sidecar, port, phase), r)| RefusalCount {
                        container,
                        sidecar,
                        port,
                        phase,
                        count: r.count,
                        processes: ranked(r.processes.iter().map(|p| (p.name.as_str(), p.count))),
                        guarded: r.guarded == r.incidents,
                    })
                    .collect(),
                window_p50: nearest_rank(&acc.windows, 0.5),
                window_p95: nearest_rank(&acc.windows, 0.95),
                // Agents keep incidents, not pod starts: no split to verify with.
                template_change: None,
                stuck_job_pods: acc
                    .stuck
                    .into_iter()
                    .map(|(sidecar, pods)| (sidecar, pods.len() as f64))
                    .collect(),
            };
            (key, ev)
        })
        .collect();
    Fleet {
        source: Source::Agents { urls },
        workloads,
        // An agent knows its node, not its cluster.
        clusters: None,
    }
}

/// Refusals of one client container on one sidecar port in one phase, summed.
#[derive(Default)]
struct Refused {
    count: f64,
    processes: Vec<ProcessCount>,
    incidents: u64,
    /// Of those incidents, the `guarded` ones.
    guarded: u64,
}

/// The nearest-rank quantile of sorted values: the smallest value with at least
/// `q` of them at or below it (an observed window, never an interpolation).
pub fn nearest_rank(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted.get(rank.min(sorted.len()) - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incident(pod: &str, phase: &str, window: Option<f64>) -> AgentIncident {
        AgentIncident {
            kind: "sidecar_race".into(),
            phase: phase.into(),
            pod_uid: pod.into(),
            namespace: Some("shop".into()),
            workload: Some(WorkloadRef {
                kind: "Deployment".into(),
                name: "checkout".into(),
            }),
            container: Some("app".into()),
            sidecar: Some("istio-proxy".into()),
            pattern: "classic".into(),
            port: Some(15001),
            refused_count: 4,
            race_window_seconds: window,
            processes: vec![],
            guarded: false,
            pod_start: Some("created".into()),
            ..AgentIncident::default()
        }
    }

    #[test]
    fn a_unix_socket_incident_ranks_its_workload_and_is_no_stuck_job() {
        let on_socket = AgentIncident {
            port: None,
            ..incident("p1", "startup", Some(1.5))
        };
        let f = fleet(vec!["http://a".into()], [on_socket]);
        let (_, ev) = f.workloads.iter().next().unwrap();
        assert!(ev.stuck_job_pods.is_empty(), "{:?}", ev.stuck_job_pods);
        assert_eq!(ev.affected_pod_starts, 1.0);
        assert_eq!(ev.window_p50, Some(1.5));
        assert_eq!(ev.incidents.len(), 1);
        assert!(ev.refusals.is_empty());
    }

    #[test]
    fn a_pod_restarted_in_place_is_affected_again() {
        // Before: one pod, one affected start, however it started again.
        let again = AgentIncident {
            pod_start: Some("restarted_in_place".into()),
            ..incident("p1", "startup", Some(1.0))
        };
        let f = fleet(
            vec!["http://a".into()],
            [incident("p1", "startup", Some(1.0)), again.clone(), again],
        );
        let (_, ev) = f.workloads.iter().next().unwrap();
        assert_eq!(ev.affected_pod_starts, 2.0);
    }

    #[test]
    fn nearest_rank_quantiles() {
        assert_eq!(nearest_rank(&[], 0.5), None);
        assert_eq!(nearest_rank(&[2.0], 0.95), Some(2.0));
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(nearest_rank(&v, 0.5), Some(10.0));
        assert_eq!(nearest_rank(&v, 0.95), Some(19.0));
        assert_eq!(nearest_rank(&[1.0, 2.0, 3.0], 0.5), Some(2.0));
    }

    #[test]
    fn incidents_group_by_workload() {
        let f = fleet(
            vec!["http://a".into()],
            [
                incident("p1", "startup", Some(1.0)),
                incident("p1", "startup", Some(3.0)),
                incident("p2", "startup", Some(2.0)),
                incident("p2", "drain", None),
                incident("p3", "future-phase", None),
            ],
        );
        let (key, ev) = f.workloads.iter().next().unwrap();
        assert_eq!(key.name, "checkout");
        assert_eq!(ev.pod_starts, None);
        assert_eq!(ev.affected_pod_starts, 2.0);
        assert_eq!(ev.window_p50, Some(2.0));
        assert_eq!(ev.window_p95, Some(3.0));
        let startup = ev
            .incidents
            .iter()
            .find(|i| i.phase == Phase::Startup)
            .unwrap();
        assert_eq!(startup.count, 3.0);
        let refused: f64 = ev.refusals.iter().map(|r| r.count).sum();
        assert_eq!(refused, 16.0);
    }

    #[test]
    fn refused_processes_sum_per_client_and_port_and_guard_only_when_all_do() {
        let with = |processes: &[(&str, u64)], guarded: bool| AgentIncident {
            processes: processes
                .iter()
                .map(|(name, count)| ProcessCount {
                    name: (*name).into(),
                    count: *count,
                })
                .collect(),
            guarded,
            ..incident("p1", "startup", None)
        };
        let f = fleet(
            vec!["http://a".into()],
            [
                with(&[("java", 3), ("curl", 1)], true),
                with(&[("java", 1)], false),
            ],
        );
        let r = &f.workloads.values().next().unwrap().refusals[0];
        let got: Vec<(&str, u64)> = r
            .processes
            .iter()
            .map(|p| (p.name.as_str(), p.count))
            .collect();
        assert_eq!(got, [("java", 4), ("curl", 1)]);
        assert!(!r.guarded, "one unguarded incident is unguarded evidence");
        let all = fleet(vec![], [with(&[("nc", 2)], true), with(&[("nc", 1)], true)]);
        assert!(all.workloads.values().next().unwrap().refusals[0].guarded);
    }
}
