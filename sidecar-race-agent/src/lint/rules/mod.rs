//! The lint rules. Each finding has a stable ID (`SR001` …, never reused), a
//! severity, the containers involved, the reason and the fix, in the names the user
//! knows. docs/reference.md's "lint" section lists them; change both together.
//!
//! One module per family of findings: `sidecars` (SR001–SR004: classic and native
//! sidecars that serve ports), `sleeps` (SR005, SR006: sleeps that guess at ordering),
//! `init` (SR007), `meshes` (SR006 for Linkerd, SR008, SR009, SR011: injected
//! sidecars), `version` (SR010);
//! `evidence` holds what they share: who serves and who dials a port, the probe to add.

mod evidence;
mod init;
mod meshes;
mod sidecars;
mod sleeps;
mod version;

use serde::Serialize;

pub use self::evidence::{ProbePlan, ProbeSpec, container, dialers, probe_for, served_ports};
use super::{Options, input::Location, workload::Workload};
use crate::inventory::pod_info::{ContainerInfo, Role};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    ClassicSidecarServesPort,
    JobWithClassicSidecar,
    NativeSidecarWithoutStartupProbe,
    StartupProbeWrongPort,
    SleepBeforeApp,
    PreStopSleep,
    InitWaitsForContainer,
    IstioHoldApplication,
    MeshNativeSidecarMode,
    ClusterTooOld,
    InjectedClassicSidecar,
}

impl Rule {
    pub const ALL: [Rule; 11] = [
        Rule::ClassicSidecarServesPort,
        Rule::JobWithClassicSidecar,
        Rule::NativeSidecarWithoutStartupProbe,
        Rule::StartupProbeWrongPort,
        Rule::SleepBeforeApp,
        Rule::PreStopSleep,
        Rule::InitWaitsForContainer,
        Rule::IstioHoldApplication,
        Rule::MeshNativeSidecarMode,
        Rule::ClusterTooOld,
        Rule::InjectedClassicSidecar,
    ];

    pub fn id(self) -> &'static str {
        match self {
            Rule::ClassicSidecarServesPort => "SR001",
            Rule::JobWithClassicSidecar => "SR002",
            Rule::NativeSidecarWithoutStartupProbe => "SR003",
            Rule::StartupProbeWrongPort => "SR004",
            Rule::SleepBeforeApp => "SR005",
            Rule::PreStopSleep => "SR006",
            Rule::InitWaitsForContainer => "SR007",
            Rule::IstioHoldApplication => "SR008",
            Rule::MeshNativeSidecarMode => "SR009",
            Rule::ClusterTooOld => "SR010",
            Rule::InjectedClassicSidecar => "SR011",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Rule::ClassicSidecarServesPort => "classic-sidecar-serves-port",
            Rule::JobWithClassicSidecar => "job-with-classic-sidecar",
            Rule::NativeSidecarWithoutStartupProbe => "native-sidecar-without-startup-probe",
            Rule::StartupProbeWrongPort => "startup-probe-wrong-port",
            Rule::SleepBeforeApp => "sleep-before-app",
            Rule::PreStopSleep => "prestop-sleep",
            Rule::InitWaitsForContainer => "init-waits-for-container",
            Rule::IstioHoldApplication => "istio-hold-application",
            Rule::MeshNativeSidecarMode => "mesh-native-sidecar-mode",
            Rule::ClusterTooOld => "cluster-too-old",
            Rule::InjectedClassicSidecar => "injected-classic-sidecar",
        }
    }

    /// Rules about start/stop ordering: none of them is left after `lint --fix`.
    pub fn is_ordering(self) -> bool {
        matches!(
            self,
            Rule::ClassicSidecarServesPort
                | Rule::JobWithClassicSidecar
                | Rule::NativeSidecarWithoutStartupProbe
                | Rule::StartupProbeWrongPort
                | Rule::SleepBeforeApp
                | Rule::InitWaitsForContainer
        )
    }
}

impl Serialize for Rule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub id: &'static str,
    pub rule: Rule,
    pub severity: Severity,
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    pub containers: Vec<String>,
    pub reason: String,
    pub fix: String,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,
}

impl Finding {
    pub(super) fn new(
        w: &Workload,
        rule: Rule,
        severity: Severity,
        containers: Vec<String>,
    ) -> Self {
        Finding {
            id: rule.id(),
            rule,
            severity,
            kind: w.kind.clone(),
            namespace: w.namespace.clone(),
            name: w.name.clone(),
            containers,
            reason: String::new(),
            fix: String::new(),
            location: w.location.clone(),
        }
    }

    pub(super) fn says(mut self, reason: String, fix: String) -> Self {
        self.reason = reason;
        self.fix = fix;
        self
    }

    pub fn workload(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }
}

/// Every finding for one workload, before suppression.
pub fn check(w: &Workload, opts: &Options) -> Vec<Finding> {
    let mut out = Vec::new();
    let classic: Vec<&ContainerInfo> = w
        .info
        .containers
        .iter()
        .filter(|c| c.role == Role::ClassicSidecar)
        .collect();
    for s in &classic {
        sidecars::classic_sidecar(w, s, opts, &mut out);
    }
    for s in w
        .info
        .containers
        .iter()
        .filter(|c| c.role == Role::NativeSidecar)
    {
        sidecars::native_sidecar(w, s, opts, &mut out);
    }
    sleeps::sleep_hacks(w, &classic, &mut out);
    init::init_waits(w, &mut out);
    meshes::meshes(w, opts, &mut out);
    if let Some(v) = opts.kube_version {
        version::cluster_version(w, v, !out.is_empty(), &mut out);
    }
    out
}
