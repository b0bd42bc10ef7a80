//! The fixes of a workload's report line: one per client container refused on a
//! sidecar port in a phase, and one per classic sidecar keeping Job pods running.
//!
//! The fix sentences are the agent's own ([`crate::detect::advice`]): one piece of
//! code says what to do, here and on `/api/v1/incidents`.

use std::collections::BTreeMap;

use serde::Serialize;

use super::fleet::{IncidentCount, RefusalCount, known, whole};
use crate::{
    detect::{
        Kind, Phase,
        advice::{Subject, advice, shows_workaround, workaround},
        processes::ProcessCount,
    },
    pods::catalog::CATALOG,
    pods::pod_info::Pattern,
};

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
/// One fix per (phase, sidecar, pattern, client container, port): incidents say the
/// pattern, refusals (same sidecar and phase) say who dialed which port.
pub(super) fn fixes(incidents: &[&IncidentCount], refusals: &[&RefusalCount]) -> Vec<Fix> {
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

pub(super) fn fix(i: &IncidentCount, r: &RefusalCount) -> Fix {
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
        known: None,
        unexpanded: None,
        protocol: crate::detect::service::Protocol::Tcp,
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
pub(super) fn stuck_job_fix(sidecar: &str) -> Fix {
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
            known: None,
            unexpanded: None,
            protocol: crate::detect::service::Protocol::Tcp,
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
