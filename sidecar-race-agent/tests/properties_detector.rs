//! Property tests of the detector: any sequence of facts (and of time passing) gives no
//! panic, and what it reports adds up. Every refusal that goes in is either in an
//! incident (shown or still hidden) or counted as not a race; an incident whose phase
//! is final keeps it; the incident history never exceeds its cap.

use std::{
    collections::{HashMap, HashSet},
    net::SocketAddr,
};

use proptest::prelude::*;
use serde_json::json;
use sidecar_race_agent::{
    detect::{
        Change, Client, Detector, DetectorConfig, Fact, Phase, PodMeta, State, incident::Hidden,
        timeline::MAX_ENTRIES,
    },
    pods::pod_info::PodInfo,
};

const PODS: [&str; 3] = [
    "00000000-0000-4000-8000-000000000001",
    "00000000-0000-4000-8000-000000000002",
    "00000000-0000-4000-8000-000000000003",
];
const CONTAINERS: [&str; 4] = ["c-app", "c-proxy", "c-app-2", "c-init"];
const SECOND: u64 = 1_000_000_000;

/// What the pod source says of the three pods.
#[derive(Debug, Clone)]
struct PodShape {
    known: bool,
    host_network: bool,
    pod_ip: bool,
    terminating: bool,
    job: bool,
    deleted: bool,
}

struct Meta {
    pods: HashMap<String, PodInfo>,
    deleted: HashSet<String>,
}

impl Meta {
    fn new(shapes: &[PodShape]) -> Self {
        let mut pods = HashMap::new();
        let mut deleted = HashSet::new();
        for (uid, s) in PODS.iter().zip(shapes) {
            if s.deleted {
                deleted.insert(uid.to_string());
            }
            if !s.known {
                continue;
            }
            let status = |name: &str, id: &str, running: bool| {
                let state = if running {
                    json!({"running": {"startedAt": "2026-11-29T10:00:01Z"}})
                } else {
                    json!({"terminated": {"exitCode": 0, "startedAt": "2026-11-29T10:00:01Z", "finishedAt": "2026-11-29T10:00:02Z"}})
                };
                json!({"name": name, "containerID": format!("containerd://{id}"), "image": "x", "imageID": "x",
                       "ready": true, "restartCount": 0, "state": state})
            };
            let mut meta = json!({"name": format!("pod-{uid}"), "namespace": "shop", "uid": uid});
            if s.terminating {
                meta["deletionTimestamp"] = json!("2026-11-29T10:00:30Z");
                meta["deletionGracePeriodSeconds"] = json!(30);
            }
            if s.job {
                meta["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": true}]);
            }
            let pod = json!({
                "apiVersion": "v1", "kind": "Pod", "metadata": meta,
                "spec": {
                    "hostNetwork": s.host_network,
                    "initContainers": [{"name": "init", "image": "x"}],
                    "containers": [
                        {"name": "app", "image": "x", "ports": [{"containerPort": 8080}]},
                        {"name": "istio-proxy", "image": "x", "ports": [{"containerPort": 15001}]},
                        {"name": "app-2", "image": "x"},
                    ],
                },
                "status": {
                    "podIP": if s.pod_ip { json!("10.0.0.1") } else { json!(null) },
                    "initContainerStatuses": [status("init", CONTAINERS[3], false)],
                    "containerStatuses": [status("app", CONTAINERS[0], !s.job), status("istio-proxy", CONTAINERS[1], true), status("app-2", CONTAINERS[2], !s.job)],
                },
            });
            pods.insert(
                uid.to_string(),
                PodInfo::from_json(pod).expect("a valid pod"),
            );
        }
        Self { pods, deleted }
    }
}

impl PodMeta for Meta {
    fn pod(&self, uid: &str) -> Option<&PodInfo> {
        self.pods.get(uid)
    }
    fn is_deleted(&self, uid: &str) -> bool {
        self.deleted.contains(uid)
    }
    fn container_name(&self, id: &str) -> Option<&str> {
        self.pods
            .values()
            .flat_map(|p| &p.statuses)
            .find(|s| s.container_id == id)
            .map(|s| s.name.as_str())
    }
    /// Boot time 0 is 2026-11-29T10:00:00Z.
    fn boot_ns(&self, t: jiff::Timestamp) -> Option<u64> {
        let secs = u64::try_from(t.as_second() - 1_795_946_400).ok()?;
        Some(secs * SECOND)
    }
    fn each_pod(&self, f: &mut dyn FnMut(&PodInfo)) {
        for (uid, p) in &self.pods {
            if !self.deleted.contains(uid) {
                f(p);
            }
        }
    }
}

#[derive(Debug, Clone)]
enum Step {
    Fact {
        dt: u64,
        back: u64,
        what: u8,
        pod: usize,
        container: usize,
        addr: usize,
        port: usize,
        redirect: bool,
    },
    Advance {
        dt: u64,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => (0..3 * SECOND, prop_oneof![3 => Just(0u64), 1 => 0..SECOND / 2], 0u8..7, 0usize..3, 0usize..5, 0usize..6, 0usize..3, any::<bool>())
            .prop_map(|(dt, back, what, pod, container, addr, port, redirect)| Step::Fact { dt, back, what, pod, container, addr, port, redirect }),
        1 => prop_oneof![0..SECOND, 0..200 * SECOND].prop_map(|dt| Step::Advance { dt }),
    ]
}

fn pod_shape() -> impl Strategy<Value = PodShape> {
    (
        any::<bool>(),
        prop::bool::weighted(0.2),
        any::<bool>(),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.1),
    )
        .prop_map(
            |(known, host_network, pod_ip, terminating, job, deleted)| PodShape {
                known,
                host_network,
                pod_ip,
                terminating,
                job,
                deleted,
            },
        )
}

const ADDRS: [&str; 6] = [
    "127.0.0.1",
    "::1",
    "10.0.0.1",
    "10.0.0.2",
    "0.0.0.0",
    "::ffff:127.0.0.1",
];
const PORTS: [u16; 3] = [15001, 8080, 9090];

/// Builds the fact of a step at time `ts`; `None` when the step passes time only.
fn fact(ts: u64, s: &Step) -> Option<Fact> {
    let Step::Fact {
        what,
        pod,
        container,
        addr,
        port,
        redirect,
        ..
    } = *s
    else {
        return None;
    };
    let pod_uid: std::sync::Arc<str> = PODS[pod].into();
    let sock = |a: usize, p: u16| -> SocketAddr {
        let ip: std::net::IpAddr = ADDRS[a].parse().unwrap();
        SocketAddr::new(ip, p)
    };
    let container_id = (container < CONTAINERS.len()).then(|| CONTAINERS[container].to_string());
    let client = match &container_id {
        Some(id) => Client::Container(id.as_str().into()),
        None => Client::Cgroup(42),
    };
    Some(match what {
        0 | 1 => Fact::Refused {
            ts,
            pod_uid,
            client,
            dst: if redirect {
                sock(3, 80)
            } else {
                sock(addr, PORTS[port])
            },
            local_dst: redirect.then(|| sock(0, PORTS[port])),
            process: ["java", "curl"][what as usize].into(),
        },
        2 => Fact::ListenerUp {
            ts,
            pod_uid,
            container_id,
            addr: sock(addr, PORTS[port]),
        },
        3 => Fact::ListenerDown {
            ts,
            pod_uid,
            container_id,
            addr: sock(addr, PORTS[port]),
        },
        4 => Fact::PodStarted { ts, pod_uid },
        5 => match container_id {
            Some(container_id) => Fact::ContainerStarted {
                ts,
                pod_uid,
                container_id,
            },
            None => Fact::PodRemoved { ts, pod_uid },
        },
        _ => match container_id {
            Some(container_id) => Fact::ContainerRemoved {
                ts,
                pod_uid,
                container_id,
            },
            None => Fact::PodRemoved { ts, pod_uid },
        },
    })
}

/// Runs `steps`, checking the invariants after each; returns a description of the
/// first violation.
fn run(steps: &[Step], shapes: &[PodShape], history: usize) -> Result<(), String> {
    let meta = Meta::new(shapes);
    let mut d = Detector::new(DetectorConfig {
        history,
        ..DetectorConfig::default()
    });
    let mut now = 0u64;
    let mut refused_in = 0u64;
    let mut not_a_race = 0u64;
    let mut final_phase: HashMap<u64, Phase> = HashMap::new();
    let mut resolved_once: HashSet<u64> = HashSet::new();
    let mut evicted_count = 0u64;
    let mut seen_ids: HashSet<u64> = HashSet::new();
    let mut counted_before: HashMap<u64, u64> = HashMap::new();
    for (i, s) in steps.iter().enumerate() {
        let changes = match s {
            Step::Advance { dt } => {
                now += dt;
                d.advance(now, &meta)
            }
            Step::Fact { dt, back, .. } => {
                now += dt;
                let f = fact(now.saturating_sub(*back), s).expect("a fact step");
                if let Fact::Refused { .. } = f {
                    refused_in += 1;
                }
                d.observe(f, &meta)
            }
        };
        for c in &changes {
            match c {
                Change::NotARace { refused, .. } => not_a_race += refused,
                Change::Resolved(id) if !resolved_once.insert(*id) => {
                    return Err(format!("step {i}: incident {id} resolved twice"));
                }
                _ => {}
            }
        }
        let log = d.incidents();
        if log.len() > history {
            return Err(format!(
                "step {i}: {} incidents kept, cap {history}",
                log.len()
            ));
        }
        // Incidents that left the history take their refusals with them.
        let kept: HashSet<u64> = log.newest_first().map(|inc| inc.id).collect();
        for id in seen_ids.iter().filter(|id| !kept.contains(id)) {
            evicted_count += counted_before.remove(id).unwrap_or(0);
        }
        seen_ids.retain(|id| kept.contains(id));
        let mut in_incidents = 0;
        for inc in log.newest_first() {
            seen_ids.insert(inc.id);
            // Discarded refusals count as not a race, merged ones in another incident.
            let counted = if matches!(inc.hidden, Some(Hidden::Discarded | Hidden::Merged)) {
                0
            } else {
                inc.refused_count
            };
            counted_before.insert(inc.id, counted);
            in_incidents += counted;
            let by_process: u64 = inc.processes.top().iter().map(|p| p.count).sum();
            if by_process != inc.refused_count {
                return Err(format!(
                    "step {i}: incident {} counts {} refusals, its processes {by_process}",
                    inc.id, inc.refused_count
                ));
            }
            // The timeline's refusal entries (and what its bound dropped) are the count
            // too, in time order, within the bound.
            let tl = &inc.timeline;
            if !tl.is_empty() && tl.refused_total() != inc.refused_count {
                return Err(format!(
                    "step {i}: incident {} counts {} refusals, its timeline {}",
                    inc.id,
                    inc.refused_count,
                    tl.refused_total()
                ));
            }
            if tl.entries().len() > MAX_ENTRIES
                || tl.entries().windows(2).any(|w| w[0].at > w[1].at)
            {
                return Err(format!("step {i}: incident {}'s timeline {tl:?}", inc.id));
            }
            if inc.is_final() && inc.is_shown() {
                match final_phase.get(&inc.id) {
                    Some(p) if *p != inc.phase => {
                        return Err(format!(
                            "step {i}: incident {} was final in {p:?}, now {:?}",
                            inc.id, inc.phase
                        ));
                    }
                    Some(_) => {}
                    None => {
                        final_phase.insert(inc.id, inc.phase);
                    }
                }
            } else if final_phase.contains_key(&inc.id) {
                return Err(format!(
                    "step {i}: incident {} was final and shown, now {:?} {:?} hidden {:?}",
                    inc.id, inc.state, inc.phase, inc.hidden
                ));
            }
            if inc.state == State::Open && resolved_once.contains(&inc.id) {
                return Err(format!("step {i}: incident {} reopened", inc.id));
            }
        }
        let out = in_incidents + not_a_race + evicted_count;
        if out != refused_in {
            return Err(format!(
                "step {i} ({s:?}): {refused_in} refusals in, {in_incidents} in incidents + {not_a_race} not a race + {evicted_count} evicted"
            ));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, ..ProptestConfig::default() })]

    #[test]
    fn any_facts_keep_the_counts_and_final_phases(
        steps in prop::collection::vec(step(), 1..80),
        shapes in prop::collection::vec(pod_shape(), 3),
    ) {
        if let Err(e) = run(&steps, &shapes, 10_000) {
            prop_assert!(false, "{}", e);
        }
    }

    /// With a tiny history the oldest incidents go, and the rest still adds up.
    #[test]
    fn the_history_never_exceeds_its_cap(
        steps in prop::collection::vec(step(), 1..80),
        shapes in prop::collection::vec(pod_shape(), 3),
        history in 1usize..4,
    ) {
        if let Err(e) = run(&steps, &shapes, history) {
            prop_assert!(false, "{}", e);
        }
    }
}
