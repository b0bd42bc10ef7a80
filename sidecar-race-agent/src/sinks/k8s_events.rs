//! Kubernetes Events (events.k8s.io/v1) on pods with races, so `kubectl describe pod`
//! shows the evidence and the fix. One Event per (pod, reason, container, sidecar,
//! port): a recurrence updates its `series` instead of posting another. Posting is
//! rate-limited per node and never blocks detection: notices queue on a bounded channel
//! and overflow is dropped and counted.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::{core::v1::ObjectReference, events::v1::Event},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;
use tokio::sync::mpsc;

use crate::{
    detect::{
        Phase,
        incident::Kind,
        render::{IncidentView, PodStart},
        timeline_view::short,
    },
    pipeline::outcome::{Outcome, StuckJob},
    sinks::token_bucket::TokenBucket,
};

pub const REPORTING_CONTROLLER: &str = "sidecar-race.io/agent";

/// What to tell about one incident.
#[derive(Debug, Clone, PartialEq)]
pub struct EventNotice {
    /// Deduplication key: the same race recurring.
    pub key: String,
    pub namespace: String,
    pub pod: String,
    pub pod_uid: String,
    pub container: Option<String>,
    pub reason: &'static str,
    pub note: String,
}

/// The notice for an incident, when it is a race (not `unresolved`) and the pod's
/// names are known (an Event needs them).
pub fn notice_for(v: &IncidentView) -> Option<EventNotice> {
    let container = v.container.clone();
    let who = container.as_deref().unwrap_or("a container");
    let sidecar = v.sidecar.as_deref().unwrap_or("an unknown sidecar");
    // What was refused, in the note and in the key that groups recurrences.
    let (target, refused_on) = match &v.socket {
        Some(s) => (format!("socket {}", s.path), s.path.clone()),
        None => (
            v.local_destination
                .as_deref()
                .or(v.destination.as_deref())
                .unwrap_or("")
                .to_string(),
            v.port.unwrap_or(0).to_string(),
        ),
    };
    let (reason, mut note) = match (v.kind, v.phase) {
        (Kind::AppNotReady, _) => return None,
        (Kind::StuckJob, _) => (
            "JobKeptAliveBySidecar",
            format!(
                "{sidecar} (classic sidecar) kept running after the app containers finished; the Job cannot complete. Fix: {}",
                v.advice
            ),
        ),
        (Kind::InitDeadlock, _) => (
            "InitWaitsForClassicSidecar",
            format!(
                "init container {who} was refused {} times on {target} by {sidecar}, which cannot start before the init containers finish. Fix: {}",
                v.refused_count, v.advice
            ),
        ),
        (Kind::SidecarRace, Phase::Unresolved) => return None,
        (Kind::SidecarRace, phase) => {
            let (reason, when) = match phase {
                Phase::Startup => ("SidecarStartupRace", "before it listened (startup)"),
                Phase::Drain if v.drain_sub_phase.is_some() => (
                    "SidecarDrainRace",
                    "after it stopped listening (drain) until the kubelet restarted it during the pod's termination",
                ),
                Phase::Drain => ("SidecarDrainRace", "after it stopped listening (drain)"),
                _ => ("SidecarRestartRace", "while it restarted"),
            };
            let window = v
                .race_window_seconds
                .map(|w| format!("; race window {w:.2} s"))
                .unwrap_or_default();
            // The kubelet restarted every container of the pod in the same sandbox: a
            // pod start no pod creation shows.
            let restarted = match v.pod_start {
                PodStart::RestartedInPlace => {
                    ", after all of the pod's containers were restarted in place"
                }
                PodStart::Created => "",
            };
            (
                reason,
                format!(
                    "{who} was refused {} times on {target} by {sidecar} ({} sidecar) {when}{restarted}{window}. Fix: {}",
                    v.refused_count,
                    v.pattern.as_str(),
                    v.advice
                ),
            )
        }
    };
    truncate(&mut note, NOTE_MAX);
    with_timeline(&mut note, v);
    Some(EventNotice {
        key: format!(
            "{}/{reason}/{}/{}/{}",
            v.pod_uid,
            container
                .as_deref()
                .or(v.container_id.as_deref())
                .unwrap_or(""),
            v.sidecar.as_deref().unwrap_or(""),
            refused_on
        ),
        namespace: v.namespace.clone()?,
        pod: v.pod.clone()?,
        pod_uid: v.pod_uid.clone(),
        container,
        reason,
        note,
    })
}

/// The API's limit on `note` is 1 kB.
const NOTE_MAX: usize = 1024;

/// `note` followed by the incident's timeline in short form, in what is left of the
/// limit: the timeline is cut (whole items), never the note before it.
fn with_timeline(note: &mut String, v: &IncidentView) {
    const LEAD: &str = " Timeline: ";
    let room = NOTE_MAX.saturating_sub(note.len() + LEAD.len());
    let timeline = short(&v.timeline, room);
    if !timeline.is_empty() {
        note.push_str(LEAD);
        note.push_str(&timeline);
    }
}

fn truncate(s: &mut String, max: usize) {
    if s.len() > max {
        let mut cut = max - 3;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
}

/// Counts of the publisher, for logs and tests.
#[derive(Debug, Default)]
pub struct PublisherStats {
    pub created: AtomicU64,
    pub updated: AtomicU64,
    /// Dropped by the rate limit or a full queue.
    pub dropped: AtomicU64,
    /// The API server answered an error (or nothing) after the retries.
    pub failed: AtomicU64,
}

#[derive(Clone)]
pub struct EventPublisher {
    tx: mpsc::Sender<EventNotice>,
    pub stats: Arc<PublisherStats>,
}

impl EventPublisher {
    /// Starts posting with `client` as `sidecar-race-agent` on `node`, at most
    /// `per_minute` Events per minute (bursts of as many).
    pub fn spawn(client: Client, node: String, per_minute: u32) -> Self {
        let (tx, rx) = mpsc::channel(256);
        let stats = Arc::new(PublisherStats::default());
        tokio::spawn(post(client, node, per_minute.max(1), rx, stats.clone()));
        Self { tx, stats }
    }

    /// Races whose accounting is due (and late refusals of accounted ones) become
    /// Events on their pods, and a stuck Job as soon as it is found (it stays stuck
    /// until someone acts); `app_not_ready` never does.
    pub fn consume(&self, outcomes: &[Outcome]) {
        for o in outcomes {
            let v = match o {
                Outcome::Settled(a) if a.view.kind != Kind::StuckJob => &a.view,
                Outcome::LateRefusals(a) => &a.view,
                Outcome::StuckJob(StuckJob::Found(v)) => &**v,
                _ => continue,
            };
            if let Some(notice) = notice_for(v) {
                self.notify(notice);
            }
        }
    }

    /// Queues a notice; never waits.
    pub fn notify(&self, notice: EventNotice) {
        if self.tx.try_send(notice).is_err() {
            self.stats.dropped.fetch_add(1, Relaxed);
        }
    }
}

/// An Event posted (its name follows from the key), for updating its series.
struct Posted {
    namespace: String,
    count: i32,
}

/// Tries after a transient failure (a 5xx or 429 answer, no answer at all) before an
/// Event counts as failed.
const RETRIES: u32 = 2;
const RETRY_AFTER: Duration = Duration::from_millis(250);

async fn post(
    client: Client,
    node: String,
    per_minute: u32,
    mut rx: mpsc::Receiver<EventNotice>,
    stats: Arc<PublisherStats>,
) {
    // `per_minute` Events at once, refilled continuously.
    let burst = f64::from(per_minute);
    let mut limit = TokenBucket::full(burst, burst / 60.0, Instant::now());
    let mut posted: HashMap<String, Posted> = HashMap::new();
    let mut warned = false;
    while let Some(n) = rx.recv().await {
        if !limit.take(Instant::now()) {
            stats.dropped.fetch_add(1, Relaxed);
            continue;
        }
        let api: Api<Event> = Api::namespaced(client.clone(), &n.namespace);
        let name = format!("{}.{:016x}", n.pod, fnv1a(&n.key));
        let known = posted.get(&n.key).map(|p| p.count);
        match deliver(&api, &n, &name, &node, known).await {
            Ok((count, delivered)) => {
                match delivered {
                    Delivered::Created => stats.created.fetch_add(1, Relaxed),
                    Delivered::Updated => stats.updated.fetch_add(1, Relaxed),
                };
                posted.insert(
                    n.key.clone(),
                    Posted {
                        namespace: n.namespace.clone(),
                        count,
                    },
                );
            }
            Err(e) => {
                stats.failed.fetch_add(1, Relaxed);
                if !warned {
                    tracing::warn!(
                        "cannot post a Kubernetes Event ({e}); detection goes on, further failures are only counted"
                    );
                    warned = true;
                }
            }
        }
        // Keep the dedup table bounded: forget the oldest namespace's entries first.
        if posted.len() > 10_000 {
            let ns = posted.values().next().map(|p| p.namespace.clone());
            posted.retain(|_, p| Some(&p.namespace) != ns.as_ref());
        }
    }
}

enum Delivered {
    Created,
    Updated,
}

/// Posts notice `n` as Event `name`: a recurrence (`known` is the count posted so far)
/// updates its series, a first one creates it. An Event the API server expired (404 on
/// the update) is created again; one that exists already (409 on the create: posted
/// before this agent restarted, or by its predecessor) has its series updated, counting
/// on from 2 since the earlier count is not known. Returns the series count now.
async fn deliver(
    api: &Api<Event>,
    n: &EventNotice,
    name: &str,
    node: &str,
    known: Option<i32>,
) -> Result<(i32, Delivered), kube::Error> {
    if let Some(count) = known {
        match update(api, n, name, count + 1).await {
            Err(e) if status(&e) == Some(404) => {}
            other => return other.map(|_| (count + 1, Delivered::Updated)),
        }
    }
    match create(api, n, name, node).await {
        Err(e) if status(&e) == Some(409) => update(api, n, name, 2)
            .await
            .map(|_| (2, Delivered::Updated)),
        other => other.map(|_| (1, Delivered::Created)),
    }
}

async fn create(
    api: &Api<Event>,
    n: &EventNotice,
    name: &str,
    node: &str,
) -> Result<(), kube::Error> {
    let mut attempt = 0;
    loop {
        let event = event(n, name, node, MicroTime(Timestamp::now()));
        let r = api.create(&PostParams::default(), &event).await.map(drop);
        if !retry(&r, &mut attempt).await {
            return r;
        }
    }
}

async fn update(
    api: &Api<Event>,
    n: &EventNotice,
    name: &str,
    count: i32,
) -> Result<(), kube::Error> {
    let mut attempt = 0;
    loop {
        let patch = json!({
            "series": {"count": count, "lastObservedTime": MicroTime(Timestamp::now())},
            "note": n.note,
        });
        let r = api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(drop);
        if !retry(&r, &mut attempt).await {
            return r;
        }
    }
}

/// The HTTP status the API server answered with, if it answered.
fn status(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Whether to try again after `r` (a transient failure, tries left), after a pause.
async fn retry(r: &Result<(), kube::Error>, attempt: &mut u32) -> bool {
    match r {
        Err(e) if *attempt < RETRIES && is_transient(e) => {
            *attempt += 1;
            tokio::time::sleep(RETRY_AFTER * *attempt).await;
            true
        }
        _ => false,
    }
}

fn is_transient(e: &kube::Error) -> bool {
    match status(e) {
        Some(code) => code == 429 || code >= 500,
        None => matches!(
            e,
            kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::HttpError(_)
        ),
    }
}

fn event(n: &EventNotice, name: &str, node: &str, now: MicroTime) -> Event {
    Event {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(n.namespace.clone()),
            ..ObjectMeta::default()
        },
        event_time: Some(now),
        reporting_controller: Some(REPORTING_CONTROLLER.into()),
        reporting_instance: Some(format!("sidecar-race-agent-{node}")),
        action: Some("Detected".into()),
        reason: Some(n.reason.into()),
        type_: Some("Warning".into()),
        note: Some(n.note.clone()),
        regarding: Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(n.namespace.clone()),
            name: Some(n.pod.clone()),
            uid: Some(n.pod_uid.clone()),
            field_path: n
                .container
                .as_ref()
                .map(|c| format!("spec.containers{{{c}}}")),
            ..ObjectReference::default()
        }),
        ..Event::default()
    }
}

/// A stable short hash for Event names (deterministic across agent restarts).
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}
