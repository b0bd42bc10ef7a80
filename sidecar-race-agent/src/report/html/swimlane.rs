//! An incident's timeline drawn as one swimlane per container: the app (the refused
//! client) first, then the sidecar, then any other container the timeline names. A
//! lane shows its container running from its start and, for the sidecar, serving from
//! its listen to its close; the refusals are marks on the app's lane, each carrying
//! its entry's count; what belongs to the pod (its deletion, entries the bound
//! dropped) crosses every lane. A list of the entries in words follows, for reading
//! and for screen readers.
//!
//! DOM hooks (docs/reference.md, "The html page"): the figure's `data-incident`,
//! `data-refusals` (the incident's `refused_count`) and `data-dropped-refusals`; each
//! lane's `data-lane` (`app`, `sidecar`, `other`), `data-container` and
//! `data-refusals` (the sum of its marks' counts); each mark's `data-mark` and, for
//! refusals, `data-count`.

use std::fmt::Write as _;

use super::escape::text;
use crate::report::{
    agents::{AgentIncident, TimelineEntry},
    timeline_text::{nanos, words},
};

const W: f64 = 760.0;
const LABEL: f64 = 150.0;
const RIGHT: f64 = 20.0;
const LANE_H: f64 = 30.0;
const TOP: f64 = 6.0;
const AXIS_H: f64 = 26.0;

const REFUSALS: [&str; 3] = ["first_refusal", "refusals", "last_refusal"];

/// A lane: the container and its role in the incident.
struct Lane<'a> {
    container: &'a str,
    role: &'static str,
}

/// The app's lane, the sidecar's, then the other containers the timeline names.
fn lanes(i: &AgentIncident) -> Vec<Lane<'_>> {
    let named = [
        (i.container.as_deref(), "app"),
        (i.sidecar.as_deref(), "sidecar"),
    ];
    let others = i.timeline.iter().map(|e| (e.container.as_deref(), "other"));
    let mut out: Vec<Lane> = Vec::new();
    for (container, role) in named.into_iter().chain(others) {
        if let Some(container) = container
            && !out.iter().any(|l| l.container == container)
        {
            out.push(Lane { container, role });
        }
    }
    out
}

/// Where in the plot a time falls.
struct Scale {
    origin: i128,
    span: f64,
}

impl Scale {
    fn of(entries: &[(i128, &TimelineEntry)]) -> Self {
        let origin = entries.iter().map(|(t, _)| *t).min().unwrap_or(0);
        let end = entries.iter().map(|(t, _)| *t).max().unwrap_or(0);
        Self {
            origin,
            // A timeline of one instant still gets a width.
            span: ((end - origin) as f64).max(1e6),
        }
    }

    fn x(&self, t: i128) -> f64 {
        let plot = W - LABEL - RIGHT;
        // 2% inside either end, so the first and last marks are not on the border.
        LABEL + plot * (0.02 + 0.96 * (t - self.origin) as f64 / self.span)
    }

    fn seconds(&self, t: i128) -> f64 {
        (t - self.origin) as f64 / 1e9
    }
}

/// The incident's figure: its title, the swimlanes and the entries in words.
pub fn incident(i: &AgentIncident) -> String {
    let entries: Vec<(i128, &TimelineEntry)> = i
        .timeline
        .iter()
        .filter_map(|e| Some((nanos(&e.at)?, e)))
        .collect();
    let dropped: u64 = entries
        .iter()
        .filter(|(_, e)| e.kind == "dropped")
        .map(|(_, e)| e.refused.unwrap_or(0))
        .sum();
    let mut out = format!(
        r#"<figure class="incident" data-incident="{}" data-pod="{}" data-phase="{}" data-refusals="{}" data-dropped-refusals="{dropped}">"#,
        i.id,
        text(i.pod.as_deref().unwrap_or("")),
        text(&i.phase),
        i.refused_count,
    );
    out.push_str(&title(i));
    if entries.is_empty() {
        out.push_str(
            "<p class=\"note\">No timeline: an incident restored from an older agent.</p></figure>",
        );
        return out;
    }
    let scale = Scale::of(&entries);
    let lanes = lanes(i);
    let height = TOP + LANE_H * lanes.len() as f64 + AXIS_H;
    let _ = write!(
        out,
        r#"<svg width="{W}" height="{height}" viewBox="0 0 {W} {height}" role="img" aria-label="timeline of incident {}">"#,
        i.id
    );
    for (n, lane) in lanes.iter().enumerate() {
        out.push_str(&lane_svg(lane, TOP + LANE_H * n as f64, &entries, &scale));
    }
    out.push_str(&pod_events(
        &entries,
        &scale,
        TOP + LANE_H * lanes.len() as f64,
    ));
    out.push_str(&axis(&entries, &scale, height - AXIS_H));
    out.push_str("</svg>");
    out.push_str(&entry_list(&entries, &scale));
    out.push_str("</figure>");
    out
}

/// `incident 12 · startup · pod checkout-1: app → proxy on port 15001, 14 refusals, window 1.21 s`.
fn title(i: &AgentIncident) -> String {
    let target = match i.port {
        Some(p) => format!("port {p}"),
        None => "a Unix socket".into(),
    };
    let window = match i.race_window_seconds {
        Some(w) => format!(", window {w:.2} s"),
        None => String::new(),
    };
    format!(
        "<figcaption><strong>incident {}</strong> · {} · {} · pod {}: {} → {} on {target}, {} refusal{}{window}</figcaption>",
        i.id,
        text(&i.phase),
        text(&i.state),
        text(i.pod.as_deref().unwrap_or("?")),
        text(i.container.as_deref().unwrap_or("?")),
        text(i.sidecar.as_deref().unwrap_or("?")),
        i.refused_count,
        if i.refused_count == 1 { "" } else { "s" },
    )
}

/// One container's lane: its name, running and serving bars, and its marks.
fn lane_svg(lane: &Lane, y: f64, entries: &[(i128, &TimelineEntry)], scale: &Scale) -> String {
    let mine: Vec<&(i128, &TimelineEntry)> = entries
        .iter()
        .filter(|(_, e)| e.container.as_deref() == Some(lane.container))
        .collect();
    let refusals: u64 = mine
        .iter()
        .filter(|(_, e)| REFUSALS.contains(&e.kind.as_str()))
        .map(|(_, e)| e.count.unwrap_or(1))
        .sum();
    // A container still running, a sidecar still serving, at the last entry: to the
    // plot's end.
    let end = W - RIGHT;
    let mid = y + LANE_H / 2.0;
    let mut out = format!(
        r#"<g data-lane="{}" data-container="{}" data-refusals="{refusals}"><rect class="lane-bg" x="0" y="{:.1}" width="{W}" height="{:.1}"/><text class="lane-name" x="8" y="{:.1}">{} <tspan>({})</tspan></text>"#,
        lane.role,
        text(lane.container),
        y + 2.0,
        LANE_H - 4.0,
        mid + 4.0,
        text(lane.container),
        lane.role,
    );
    let started = mine
        .iter()
        .find(|(_, e)| e.kind == "container_started")
        .map_or(LABEL, |(t, _)| scale.x(*t));
    let _ = write!(
        out,
        r#"<rect class="running" x="{started:.1}" y="{:.1}" width="{:.1}" height="8"/>"#,
        mid - 4.0,
        (end - started).max(1.0),
    );
    let mut serving_from: Option<f64> = None;
    for (t, e) in &mine {
        match e.kind.as_str() {
            "listening" => serving_from = Some(scale.x(*t)),
            "listener_closed" => {
                let from = serving_from.take().unwrap_or(LABEL);
                out.push_str(&serving(from, scale.x(*t), mid));
            }
            _ => {}
        }
    }
    if let Some(from) = serving_from {
        out.push_str(&serving(from, end, mid));
    }
    for (t, e) in &mine {
        out.push_str(&mark(e, scale.x(*t), scale.seconds(*t), mid));
    }
    out.push_str("</g>");
    out
}

fn serving(from: f64, to: f64, mid: f64) -> String {
    format!(
        r#"<rect class="serving" data-serving="" x="{from:.1}" y="{:.1}" width="{:.1}" height="8"/>"#,
        mid - 4.0,
        (to - from).max(2.0),
    )
}

/// One entry's mark on its lane, with its time and words as a tooltip.
fn mark(e: &TimelineEntry, x: f64, seconds: f64, mid: f64) -> String {
    let tip = format!("<title>+{seconds:.3}s {}</title>", text(&words(&e.kind)));
    match e.kind.as_str() {
        k if REFUSALS.contains(&k) => {
            let count = e.count.unwrap_or(1);
            let label = if count > 1 {
                format!(
                    r#"<text class="refusal-count" x="{:.1}" y="{:.1}">×{count}</text>"#,
                    x + 3.0,
                    mid - 6.0
                )
            } else {
                String::new()
            };
            format!(
                r#"<line class="refusal" data-mark="refusal" data-kind="{k}" data-count="{count}" x1="{x:.1}" x2="{x:.1}" y1="{:.1}" y2="{:.1}">{tip}</line>{label}"#,
                mid - 10.0,
                mid + 10.0,
            )
        }
        "container_started" => format!(
            r#"<circle class="started" data-mark="started" cx="{x:.1}" cy="{mid:.1}" r="5">{tip}</circle>"#
        ),
        "listening" => format!(
            r#"<rect class="listening" data-mark="listening" x="{:.1}" y="{:.1}" width="10" height="10" transform="rotate(45 {x:.1} {mid:.1})">{tip}</rect>"#,
            x - 5.0,
            mid - 5.0,
        ),
        "listener_closed" => format!(
            r#"<rect class="closed" data-mark="closed" x="{:.1}" y="{:.1}" width="9" height="9">{tip}</rect>"#,
            x - 4.5,
            mid - 4.5,
        ),
        kind => format!(
            r#"<circle class="probe" data-mark="{}" cx="{x:.1}" cy="{mid:.1}" r="4">{tip}</circle>"#,
            text(kind)
        ),
    }
}

/// Entries of the whole pod (no container): a dashed line across every lane.
fn pod_events(entries: &[(i128, &TimelineEntry)], scale: &Scale, bottom: f64) -> String {
    let mut out = String::from("<g data-pod-events=\"\">");
    for (t, e) in entries.iter().filter(|(_, e)| e.container.is_none()) {
        let x = scale.x(*t);
        let refused = match e.kind.as_str() {
            "dropped" => format!(r#" data-refused="{}""#, e.refused.unwrap_or(0)),
            _ => String::new(),
        };
        let _ = write!(
            out,
            r#"<line class="pod-event" data-mark="{}"{refused} x1="{x:.1}" x2="{x:.1}" y1="{TOP}" y2="{bottom:.1}"><title>+{:.3}s {}</title></line>"#,
            text(&e.kind),
            scale.seconds(*t),
            text(&words(&e.kind)),
        );
    }
    out.push_str("</g>");
    out
}

/// The time axis: seconds from the first entry.
fn axis(entries: &[(i128, &TimelineEntry)], scale: &Scale, y: f64) -> String {
    let last = entries
        .iter()
        .map(|(t, _)| *t)
        .max()
        .unwrap_or(scale.origin);
    let (x0, x1) = (scale.x(scale.origin), scale.x(last));
    format!(
        r#"<line class="axis" x1="{x0:.1}" x2="{x1:.1}" y1="{:.1}" y2="{:.1}"/><text x="{x0:.1}" y="{:.1}">+0s</text><text x="{x1:.1}" y="{:.1}" text-anchor="end">+{:.3}s</text>"#,
        y + 4.0,
        y + 4.0,
        y + 18.0,
        y + 18.0,
        scale.seconds(last),
    )
}

/// The entries in words: `+0.120s app first refusal (1)`.
fn entry_list(entries: &[(i128, &TimelineEntry)], scale: &Scale) -> String {
    let mut out = String::from("<ol class=\"entries\">");
    for (t, e) in entries {
        let detail = match e.kind.as_str() {
            k if REFUSALS.contains(&k) => format!(" ({})", e.count.unwrap_or(1)),
            "pod_deleted" => e
                .grace_seconds
                .map(|g| format!(" (grace {g}s)"))
                .unwrap_or_default(),
            "started" | "ready" => e.value.map(|v| format!(" ({v})")).unwrap_or_default(),
            "dropped" => format!(
                " ({} entries, {} refusals)",
                e.count.unwrap_or(0),
                e.refused.unwrap_or(0)
            ),
            _ => String::new(),
        };
        let _ = write!(
            out,
            r#"<li data-kind="{}">+{:.3}s {} {}{}</li>"#,
            text(&e.kind),
            scale.seconds(*t),
            text(e.container.as_deref().unwrap_or("pod")),
            text(&words(&e.kind)),
            text(&detail),
        );
    }
    out.push_str("</ol>");
    out
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    fn entry(kind: &str, at: &str, container: Option<&str>, count: Option<u64>) -> TimelineEntry {
        TimelineEntry {
            kind: kind.into(),
            at: at.into(),
            container: container.map(Into::into),
            count,
            ..TimelineEntry::default()
        }
    }

    /// A startup race as the agent records one: the app starts and is refused, the
    /// proxy starts and listens late.
    pub(in crate::report::html) fn startup_race() -> AgentIncident {
        AgentIncident {
            id: 7,
            kind: "sidecar_race".into(),
            phase: "startup".into(),
            state: "resolved".into(),
            pod: Some("checkout-1".into()),
            container: Some("app".into()),
            sidecar: Some("proxy".into()),
            port: Some(15001),
            refused_count: 14,
            race_window_seconds: Some(1.21),
            timeline: vec![
                entry("container_started", "2026-12-06T10:00:00Z", None, None),
                entry(
                    "container_started",
                    "2026-12-06T10:00:00.010Z",
                    Some("app"),
                    None,
                ),
                entry(
                    "first_refusal",
                    "2026-12-06T10:00:00.120Z",
                    Some("app"),
                    Some(1),
                ),
                entry(
                    "container_started",
                    "2026-12-06T10:00:00.200Z",
                    Some("proxy"),
                    None,
                ),
                entry(
                    "last_refusal",
                    "2026-12-06T10:00:01.300Z",
                    Some("app"),
                    Some(13),
                ),
                entry("listening", "2026-12-06T10:00:01.330Z", Some("proxy"), None),
            ],
            ..AgentIncident::default()
        }
    }

    fn attr(s: &str, key: &str) -> String {
        let at = s.find(&format!("{key}=\"")).unwrap() + key.len() + 2;
        s[at..].split('"').next().unwrap().to_string()
    }

    #[test]
    fn one_lane_per_container_app_first_with_the_refusals_as_its_marks() {
        let fig = incident(&startup_race());
        let lanes: Vec<(String, String)> = fig
            .split("<g data-lane=")
            .skip(1)
            .map(|g| {
                let g = format!("<g data-lane={g}");
                (attr(&g, "data-lane"), attr(&g, "data-container"))
            })
            .collect();
        assert_eq!(
            lanes,
            [
                ("app".into(), "app".into()),
                ("sidecar".into(), "proxy".into())
            ],
            "{fig}"
        );
        let app = fig.split("<g data-lane=").nth(1).unwrap();
        let app = &app[..app.find("</g>").unwrap()];
        assert_eq!(attr(app, "data-refusals"), "14", "{fig}");
        let marks: Vec<u64> = app
            .split("data-mark=\"refusal\"")
            .skip(1)
            .map(|m| attr(m, "data-count").parse().unwrap())
            .collect();
        assert_eq!(marks, [1, 13]);
        assert_eq!(attr(&fig, "data-refusals"), "14");
        // The proxy serves from its listen on.
        let proxy = fig.split("<g data-lane=").nth(2).unwrap();
        assert!(proxy.contains("data-serving") && proxy.contains("data-mark=\"listening\""));
        // The sandbox's start (no container) crosses the lanes, on no lane of its own.
        assert!(
            fig.contains(r#"class="pod-event" data-mark="container_started""#),
            "{fig}"
        );
        assert!(
            fig.contains("+1.330s</text>"),
            "the last entry's offset: {fig}"
        );
    }

    #[test]
    fn marks_are_placed_in_time_order_left_to_right() {
        let fig = incident(&startup_race());
        let first = fig.find(r#"data-kind="first_refusal""#).unwrap();
        let last = fig.find(r#"data-kind="last_refusal""#).unwrap();
        let x = |at: usize| attr(&fig[at..], "x1").parse::<f64>().unwrap();
        assert!(x(first) < x(last), "{fig}");
        assert!(x(first) > LABEL && x(last) < W - RIGHT);
    }

    #[test]
    fn a_hostile_container_name_is_text() {
        let mut i = startup_race();
        i.container = Some("<script>alert(1)</script>".into());
        for e in &mut i.timeline {
            if e.container.as_deref() == Some("app") {
                e.container = i.container.clone();
            }
        }
        let fig = incident(&i);
        assert!(!fig.contains("<script"), "{fig}");
        assert!(
            fig.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{fig}"
        );
    }
}
