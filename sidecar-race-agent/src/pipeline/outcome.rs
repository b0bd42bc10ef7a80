//! What one step of the pipeline means to its sinks (logs, metrics, Kubernetes
//! Events). Each outcome is built once by the pipeline, with the incident view it is
//! about, so no sink filters the detector's changes again or reaches back into the
//! pipeline, the detector or the inventory.

use crate::{detect::render::IncidentView, inventory::Attribution, pods::pod_info::PodTemplate};

#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// An incident is shown for the first time.
    Opened(IncidentView),
    /// An incident whose final accounting is not done yet is in another phase now.
    Rephased(IncidentView),
    /// An incident's final accounting is due (once): it is final and shown, and its
    /// pod and client are named, or the wait for their names is over.
    Settled(Accounting),
    /// Refusals counted into an incident after its final accounting (one per refusal
    /// the detector counted; `new_refusals` is 0 for the later ones of a step).
    LateRefusals(Accounting),
    /// A pod start the agent saw, once its names are known or the wait for them is over:
    /// its creation (`start` 0) or its `start`-th in-place restart of all containers.
    PodStarted {
        pod_uid: String,
        start: u32,
        who: Attribution,
        /// The pod's template, when its controller labels one (`report` dates a
        /// workload's template change from it).
        template: Option<PodTemplate>,
    },
    /// Refusals the kernel counted instead of sending since its last reading (their
    /// container was over its refusal budget), once their container is named or the
    /// wait for its name is over.
    Suppressed {
        who: Attribution,
        refusals: u64,
    },
    StuckJob(StuckJob),
}

impl Outcome {
    /// The incident whose state this outcome changes, and the change in words: opened,
    /// in another phase, or final ("incident resolved": metrics and Events count it
    /// then too). The log lines and the OTLP log records tell exactly these.
    pub fn state_change(&self) -> Option<(&IncidentView, &'static str)> {
        match self {
            Outcome::Opened(v) => Some((v, "incident opened")),
            Outcome::StuckJob(StuckJob::Found(v)) => Some((&**v, "incident opened")),
            Outcome::Rephased(v) => Some((v, "incident phase changed")),
            Outcome::Settled(a) => Some((&a.view, "incident resolved")),
            _ => None,
        }
    }
}

/// An incident to account for, with what a count of its refusals needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Accounting {
    pub view: IncidentView,
    /// The port to count refusals under: `None` when no container of the pod declares
    /// it and no listener was seen on it (a client can dial any of 65,535 ports).
    pub port: Option<u16>,
    /// For a Unix socket incident, the `socket` label to count refusals under
    /// (`<volume>/<name>`, `@name`): `None` when the socket is on no pod volume and no
    /// listener was seen on it.
    pub socket: Option<String>,
    /// Refusals not accounted for in an earlier outcome.
    pub new_refusals: u64,
}

/// A Job pod kept running by a classic sidecar after its app containers finished.
#[derive(Debug, Clone, PartialEq)]
pub enum StuckJob {
    /// Found (the incident is opened): it stays stuck until someone acts.
    Found(Box<IncidentView>),
    /// Incident `id` ended: the sidecar stopped or the pod went away.
    Ended(u64),
}
