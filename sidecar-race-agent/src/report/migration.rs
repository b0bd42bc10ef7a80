//! Migration verification: a workload's evidence before and after its pod template
//! last changed, and a verdict an engineer can sign.
//!
//! **Verdicts.** `still_racing`: the workload had an incident (a startup or drain
//! race, or an init container deadlocked on a sidecar) or an affected start since the
//! change, named with the sidecar and pattern seen since (a native sidecar without a
//! startupProbe, one whose probe passes before the port clients dial serves, a classic
//! sidecar the change did not move) and the agent's fix for it. `fixed`: none in at
//! least `--min-starts-since-change` pod starts since (default 30: by the rule of
//! three, 0 affected in 30 starts bounds the affected share at 10 % with 95 %
//! confidence). `not_enough_starts`: clean so far, in fewer starts than that.

use jiff::Timestamp;
use serde::Serialize;

use super::{
    fixes::fixes,
    fleet::{IncidentCount, RefusalCount, SplitEvidence, TemplateChange, whole},
};
use crate::{detect::Phase, pods::pod_info::Pattern};

/// Default of `--min-starts-since-change`.
pub const DEFAULT_MIN_STARTS: u64 = 30;

/// What the evidence since the change says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Fixed,
    StillRacing,
    NotEnoughStarts,
}

impl Verdict {
    /// As the text formats say it.
    pub fn words(self) -> &'static str {
        match self {
            Verdict::Fixed => "fixed",
            Verdict::StillRacing => "still racing",
            Verdict::NotEnoughStarts => "not enough starts yet",
        }
    }
}

/// One side of the change, in whole counts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Side {
    pub starts: u64,
    pub affected_starts: u64,
    /// affected / starts, 0..1; `null` without starts.
    pub affected_share: Option<f64>,
    /// Incidents of every phase (startup, drain, steady, unresolved).
    pub incidents: u64,
    pub startup_incidents: u64,
    pub drain_incidents: u64,
    pub refusals: u64,
    /// Race windows measured, and their p95.
    pub race_windows: u64,
    pub race_window_p95_seconds: Option<f64>,
}

/// A workload's migration verification, as `--format json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Migration {
    /// The newest template's hash.
    pub template: String,
    /// The creation time of its first pod, RFC 3339.
    pub template_changed_at: String,
    /// Templates seen within the range; 1 when the change is older than the range
    /// (`before` then holds nothing).
    pub templates_in_range: usize,
    pub before: Side,
    pub after: Side,
    /// The clean starts since the change that make `fixed`.
    pub min_starts_since_change: u64,
    pub verdict: Verdict,
    /// With `still_racing`: the pattern of the sidecar with the most incidents since.
    pub pattern: Option<Pattern>,
    pub sidecar: Option<String>,
    /// Its phases since.
    pub phases: Vec<Phase>,
    /// The agent's fix for what raced since.
    pub advice: Option<String>,
}

/// The verdict on `change`, `fixed` after `min_starts` clean starts.
pub fn verify(change: &TemplateChange, min_starts: u64) -> Migration {
    let after = side(&change.after);
    let raced: Vec<&IncidentCount> = change
        .after
        .incidents
        .iter()
        .filter(|i| whole(i.count) > 0)
        .collect();
    let verdict = if after.affected_starts > 0 || !raced.is_empty() {
        Verdict::StillRacing
    } else if after.starts >= min_starts {
        Verdict::Fixed
    } else {
        Verdict::NotEnoughStarts
    };
    let worst = worst_sidecar(&raced);
    let refused: Vec<&RefusalCount> = change
        .after
        .refusals
        .iter()
        .filter(|r| r.count > 0.0)
        .collect();
    let mut phases: Vec<Phase> = raced
        .iter()
        .filter(|i| worst.is_some_and(|w| w.sidecar == i.sidecar && w.pattern == i.pattern))
        .map(|i| i.phase)
        .collect();
    phases.sort();
    phases.dedup();
    Migration {
        template: change.template.clone(),
        template_changed_at: rfc3339(change.changed_at),
        templates_in_range: change.templates,
        before: side(&change.before),
        after,
        min_starts_since_change: min_starts,
        verdict,
        pattern: worst.map(|w| w.pattern),
        sidecar: worst.and_then(|w| super::fleet::known(&w.sidecar)),
        phases,
        advice: (!raced.is_empty())
            .then(|| fixes(&raced, &refused).into_iter().next())
            .flatten()
            .map(|f| f.advice),
    }
}

/// The sidecar and pattern with the most incidents (ties: the first).
fn worst_sidecar<'a>(raced: &[&'a IncidentCount]) -> Option<&'a IncidentCount> {
    let total = |x: &IncidentCount| -> f64 {
        raced
            .iter()
            .filter(|i| i.sidecar == x.sidecar && i.pattern == x.pattern)
            .map(|i| i.count)
            .sum()
    };
    raced
        .iter()
        .copied()
        .reduce(|best, i| if total(i) > total(best) { i } else { best })
}

fn side(ev: &SplitEvidence) -> Side {
    let sum = |phase: Option<Phase>| {
        whole(
            ev.incidents
                .iter()
                .filter(|i| phase.is_none_or(|p| i.phase == p))
                .map(|i| i.count)
                .sum(),
        )
    };
    let starts = whole(ev.pod_starts);
    let affected = whole(ev.affected_pod_starts);
    Side {
        starts,
        affected_starts: affected,
        affected_share: (starts > 0).then(|| (affected as f64 / starts as f64).min(1.0)),
        incidents: sum(None),
        startup_incidents: sum(Some(Phase::Startup)),
        drain_incidents: sum(Some(Phase::Drain)),
        refusals: whole(ev.refusals.iter().map(|r| r.count).sum()),
        race_windows: whole(ev.race_windows),
        race_window_p95_seconds: ev.window_p95,
    }
}

/// Unix seconds as RFC 3339 (UTC, to the millisecond when it has them).
fn rfc3339(unix: f64) -> String {
    Timestamp::from_millisecond((unix * 1000.0).round() as i64)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| format!("{unix}"))
}

/// The pattern in words, for the text formats.
pub fn pattern_words(p: Pattern) -> &'static str {
    match p {
        Pattern::Classic => "a classic sidecar in containers",
        Pattern::Native => "a native sidecar without a startupProbe",
        Pattern::NativeProbed => {
            "a native sidecar whose startupProbe passes before the port clients dial serves"
        }
        Pattern::Unknown => "a sidecar of unknown declaration",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::Kind;

    fn incident(phase: Phase, pattern: Pattern, count: f64) -> IncidentCount {
        IncidentCount {
            kind: Kind::SidecarRace,
            sidecar: "proxy".into(),
            phase,
            pattern,
            count,
        }
    }

    /// 41 of 60 starts raced on the classic template; `after` as given.
    fn change(after: SplitEvidence) -> TemplateChange {
        TemplateChange {
            template: "6c4d9f8b7".into(),
            changed_at: 1_796_119_200.5,
            templates: 2,
            before: SplitEvidence {
                pod_starts: 60.0,
                affected_pod_starts: 41.0,
                incidents: vec![incident(Phase::Startup, Pattern::Classic, 41.0)],
                refusals: vec![],
                race_windows: 41.0,
                window_p95: Some(1.4),
            },
            after,
        }
    }

    fn clean(starts: f64) -> SplitEvidence {
        SplitEvidence {
            pod_starts: starts,
            ..SplitEvidence::default()
        }
    }

    #[test]
    fn a_change_with_no_start_since_is_not_enough() {
        let m = verify(&change(clean(0.0)), 30);
        assert_eq!(m.verdict, Verdict::NotEnoughStarts);
        assert_eq!(m.after.starts, 0);
        assert_eq!(m.after.affected_share, None);
        assert_eq!((m.pattern, m.advice), (None, None));
        assert_eq!(m.template_changed_at, "2026-12-01T10:00:00.5Z");
        assert_eq!(
            (
                m.before.starts,
                m.before.affected_starts,
                m.before.race_windows
            ),
            (60, 41, 41)
        );
    }

    #[test]
    fn clean_starts_make_fixed_only_at_the_threshold() {
        assert_eq!(
            verify(&change(clean(29.0)), 30).verdict,
            Verdict::NotEnoughStarts
        );
        let fixed = verify(&change(clean(30.0)), 30);
        assert_eq!(fixed.verdict, Verdict::Fixed);
        assert_eq!(fixed.after.affected_share, Some(0.0));
        assert_eq!(fixed.min_starts_since_change, 30);
        // `increase()` extrapolates: 29.6 starts are 30 starts.
        assert_eq!(verify(&change(clean(29.6)), 30).verdict, Verdict::Fixed);
    }

    #[test]
    fn one_race_since_is_still_racing_with_its_pattern_and_fix() {
        let after = SplitEvidence {
            pod_starts: 75.0,
            affected_pod_starts: 1.0,
            incidents: vec![incident(Phase::Startup, Pattern::Native, 1.0)],
            refusals: vec![RefusalCount {
                container: "app".into(),
                sidecar: "proxy".into(),
                port: 15001,
                phase: Phase::Startup,
                count: 7.0,
                processes: vec![],
                guarded: false,
            }],
            race_windows: 1.0,
            window_p95: Some(0.9),
        };
        let m = verify(&change(after), 30);
        assert_eq!(m.verdict, Verdict::StillRacing);
        assert_eq!(m.pattern, Some(Pattern::Native));
        assert_eq!(m.sidecar.as_deref(), Some("proxy"));
        assert_eq!(m.phases, [Phase::Startup]);
        let advice = m.advice.unwrap();
        assert!(advice.contains("startupProbe"), "{advice}");
        assert_eq!((m.after.affected_starts, m.after.refusals), (1, 7));
    }

    /// A drain that still loses requests is racing, though no start was affected;
    /// and the sidecar with the most incidents names the pattern.
    #[test]
    fn a_drain_race_since_is_still_racing() {
        let after = SplitEvidence {
            pod_starts: 100.0,
            incidents: vec![
                incident(Phase::Drain, Pattern::NativeProbed, 3.0),
                IncidentCount {
                    sidecar: "db-proxy".into(),
                    ..incident(Phase::Drain, Pattern::Classic, 1.0)
                },
            ],
            ..SplitEvidence::default()
        };
        let m = verify(&change(after), 30);
        assert_eq!(m.verdict, Verdict::StillRacing);
        assert_eq!(m.pattern, Some(Pattern::NativeProbed));
        assert_eq!(m.phases, [Phase::Drain]);
        assert_eq!(m.after.drain_incidents, 4);
        // An extrapolated 0.3 of an incident is no incident.
        let noise = SplitEvidence {
            pod_starts: 40.0,
            incidents: vec![incident(Phase::Startup, Pattern::Native, 0.3)],
            ..SplitEvidence::default()
        };
        assert_eq!(verify(&change(noise), 30).verdict, Verdict::Fixed);
    }
}
