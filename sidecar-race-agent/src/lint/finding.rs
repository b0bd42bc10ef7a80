//! What a lint run reports: a [`Finding`] of a [`Rule`] (its stable ID and name) at a
//! [`Severity`], for one workload's containers. [`super::rules`] makes them;
//! docs/reference.md's "lint" section lists the rules: change both together.

use serde::Serialize;

use super::{input::Location, workload::Workload};

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    clap::ValueEnum,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// A finding's rule. Its name is the variant in kebab case; its ID (`SR001`…) is
/// stable and never reused, so it is written out, in declaration order.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    strum::IntoStaticStr,
    strum::EnumIter,
    strum::EnumProperty,
)]
#[strum(serialize_all = "kebab-case")]
pub enum Rule {
    #[strum(props(id = "SR001"))]
    ClassicSidecarServesPort,
    #[strum(props(id = "SR002"))]
    JobWithClassicSidecar,
    #[strum(props(id = "SR003"))]
    NativeSidecarWithoutStartupProbe,
    #[strum(props(id = "SR004"))]
    StartupProbeWrongPort,
    #[strum(props(id = "SR005"))]
    SleepBeforeApp,
    #[strum(props(id = "SR006"), serialize = "prestop-sleep")]
    PreStopSleep,
    #[strum(props(id = "SR007"))]
    InitWaitsForContainer,
    #[strum(props(id = "SR008"))]
    IstioHoldApplication,
    #[strum(props(id = "SR009"))]
    MeshNativeSidecarMode,
    #[strum(props(id = "SR010"))]
    ClusterTooOld,
    #[strum(props(id = "SR011"))]
    InjectedClassicSidecar,
    #[strum(props(id = "SR012"))]
    ClassicSidecarServesSocket,
}

impl Rule {
    pub fn id(self) -> &'static str {
        strum::EnumProperty::get_str(&self, "id").expect("every rule has an id")
    }

    pub fn name(self) -> &'static str {
        self.into()
    }

    /// Rules about start/stop ordering: none of them is left after `lint --fix`.
    pub fn is_ordering(self) -> bool {
        matches!(
            self,
            Rule::ClassicSidecarServesPort
                | Rule::ClassicSidecarServesSocket
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_ids_run_from_sr001_in_declaration_order_and_names_are_the_documented_ones() {
        let rules: Vec<Rule> = <Rule as strum::IntoEnumIterator>::iter().collect();
        let ids: Vec<&str> = rules.iter().map(|r| r.id()).collect();
        let expected: Vec<String> = (1..=rules.len()).map(|n| format!("SR{n:03}")).collect();
        assert_eq!(ids, expected);
        assert_eq!(Rule::PreStopSleep.name(), "prestop-sleep");
        assert_eq!(
            Rule::NativeSidecarWithoutStartupProbe.name(),
            "native-sidecar-without-startup-probe"
        );
        assert_eq!(Severity::Warning.as_str(), "warning");
    }
}
