//! A workload's charts, as inline SVG: its race windows over time (one dot per incident
//! the agents gave, at its first refusal, as high as its window, with the report's
//! p50 and p95 as lines) and its share of affected pod starts as a bar.

use std::fmt::Write as _;

use super::escape::text;
use crate::report::{agents::AgentIncident, rank::WorkloadReport, timeline_text::nanos};

const W: f64 = 560.0;
const H: f64 = 170.0;
const LEFT: f64 = 46.0;
const RIGHT: f64 = 14.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 34.0;

/// One incident's window, placed in time.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub id: u64,
    /// The first refusal, ns since the epoch.
    pub at: i128,
    pub window_seconds: f64,
}

/// The incidents with a window and a first refusal, in time order.
pub fn points(incidents: &[&AgentIncident]) -> Vec<Point> {
    let mut out: Vec<Point> = incidents
        .iter()
        .filter_map(|i| {
            Some(Point {
                id: i.id,
                at: nanos(i.first_refused_at.as_deref()?)?,
                window_seconds: i
                    .race_window_seconds
                    .filter(|w| w.is_finite() && *w >= 0.0)?,
            })
        })
        .collect();
    out.sort_by_key(|p| (p.at, p.id));
    out
}

/// `2026-12-06 10:04:31 UTC`.
fn wall(ns: i128) -> String {
    jiff::Timestamp::from_nanosecond(ns)
        .map(|t| t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|_| "?".into())
}

/// The race windows over time; `p50`, `p95` the report's quantiles.
pub fn windows(points: &[Point], p50: Option<f64>, p95: Option<f64>) -> String {
    let mut out = format!(
        r#"<figure class="chart" data-chart="race-windows" data-points="{}">"#,
        points.len()
    );
    if points.is_empty() {
        out.push_str(
            r#"<figcaption>No race window in time: the incidents come from agents (--agent or --agents-via-api), and none of theirs for this workload has one.</figcaption></figure>"#,
        );
        return out;
    }
    let top = points
        .iter()
        .map(|p| p.window_seconds)
        .chain(p50)
        .chain(p95)
        .fold(0.0_f64, f64::max);
    let top = nice_ceiling(top);
    let (first, last) = (points[0].at, points[points.len() - 1].at);
    let span = (last - first).max(1) as f64;
    let (plot_w, plot_h) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let x = |at: i128| {
        if last == first {
            LEFT + plot_w / 2.0
        } else {
            LEFT + (at - first) as f64 / span * plot_w
        }
    };
    let y = |s: f64| TOP + plot_h - s / top * plot_h;
    let _ = write!(
        out,
        r#"<svg width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img" aria-label="race windows over time">"#
    );
    for frac in [0.0, 0.5, 1.0] {
        let v = top * frac;
        let _ = write!(
            out,
            r#"<line class="grid" x1="{LEFT}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}s</text>"#,
            W - RIGHT,
            LEFT - 6.0,
            y(v) + 4.0,
            short(v),
            y = y(v),
        );
    }
    let _ = write!(
        out,
        r#"<line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{b:.1}"/><line class="axis" x1="{LEFT}" x2="{:.1}" y1="{b:.1}" y2="{b:.1}"/>"#,
        W - RIGHT,
        b = TOP + plot_h,
    );
    for (class, q) in [("p50", p50), ("p95", p95)] {
        if let Some(q) = q {
            let _ = write!(
                out,
                r#"<line class="{class}" data-quantile="{class}" x1="{LEFT}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}"><title>{class} {q:.2}s</title></line>"#,
                W - RIGHT,
                y = y(q),
            );
        }
    }
    for p in points {
        let _ = write!(
            out,
            r#"<circle class="dot" data-incident="{}" data-window-seconds="{:.3}" cx="{:.1}" cy="{:.1}" r="4"><title>incident {}: {:.2}s at {}</title></circle>"#,
            p.id,
            p.window_seconds,
            x(p.at),
            y(p.window_seconds),
            p.id,
            p.window_seconds,
            text(&wall(p.at)),
        );
    }
    let label_y = H - 12.0;
    let _ = write!(
        out,
        r#"<text x="{LEFT}" y="{label_y}">{}</text>"#,
        text(&wall(first))
    );
    if last != first {
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{label_y}" text-anchor="end">{}</text>"#,
            W - RIGHT,
            text(&wall(last))
        );
    }
    let _ = write!(
        out,
        "</svg><figcaption>Race window of each of the {} incident{} the agents hold, at its first refusal; dashed: the report's p50 (orange) and p95 (purple).</figcaption></figure>",
        points.len(),
        if points.len() == 1 { "" } else { "s" },
    );
    out
}

/// The share of affected pod starts as a bar, or why it is unknown.
pub fn share(w: &WorkloadReport) -> String {
    let Some(share) = w.affected_share else {
        return format!(
            r#"<figure class="chart" data-chart="share" data-affected="{}"><figcaption>{} affected pod start{}; the share is unknown: agents keep no count of pod starts (Prometheus does: --prometheus).</figcaption></figure>"#,
            w.affected_pod_starts,
            w.affected_pod_starts,
            if w.affected_pod_starts == 1 { "" } else { "s" },
        );
    };
    let (bar_w, bar_h) = (240.0, 18.0);
    let starts = w.pod_starts.unwrap_or(0);
    format!(
        r#"<figure class="chart" data-chart="share" data-share="{share:.4}" data-affected="{}" data-starts="{starts}"><svg width="{bar_w}" height="{bar_h}" viewBox="0 0 {bar_w} {bar_h}" role="img" aria-label="share of affected starts"><rect class="share-bg" x="0.5" y="0.5" width="{:.1}" height="{:.1}" rx="3"/><rect class="share-fill" x="0.5" y="0.5" width="{:.1}" height="{:.1}" rx="3"/></svg><figcaption>{} of {starts} pod starts affected ({:.1}%)</figcaption></figure>"#,
        w.affected_pod_starts,
        bar_w - 1.0,
        bar_h - 1.0,
        (bar_w - 1.0) * share.clamp(0.0, 1.0),
        bar_h - 1.0,
        w.affected_pod_starts,
        share * 100.0,
    )
}

/// The axis' top: 1, 2 or 5 times a power of ten, at least `v` (1 s when nothing).
fn nice_ceiling(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let mag = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|c| *c >= v)
        .unwrap_or(10.0 * mag)
}

fn short(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incident(id: u64, at: &str, window: Option<f64>) -> AgentIncident {
        AgentIncident {
            id,
            first_refused_at: Some(at.into()),
            race_window_seconds: window,
            ..AgentIncident::default()
        }
    }

    #[test]
    fn each_incident_with_a_window_is_a_dot_in_time_order() {
        let a = incident(2, "2026-12-06T10:00:05.5Z", Some(1.2));
        let b = incident(1, "2026-12-06T10:00:01Z", Some(0.7));
        let open = incident(3, "2026-12-06T10:00:09Z", None);
        let p = points(&[&a, &b, &open]);
        assert_eq!(p.iter().map(|p| p.id).collect::<Vec<_>>(), [1, 2]);
        let svg = windows(&p, Some(0.7), Some(1.2));
        assert!(svg.contains(r#"data-points="2""#), "{svg}");
        assert_eq!(svg.matches("<circle").count(), 2, "{svg}");
        // The later, longer window is right of and above the first.
        let cx = |id: u64| {
            let at = svg.find(&format!(r#"data-incident="{id}""#)).unwrap();
            let s = &svg[at..];
            let v = |k: &str| -> f64 {
                let i = s.find(k).unwrap() + k.len();
                s[i..].split('"').next().unwrap().parse().unwrap()
            };
            (v(r#"cx=""#), v(r#"cy=""#))
        };
        let (x1, y1) = cx(1);
        let (x2, y2) = cx(2);
        assert!(x2 > x1 && y2 < y1, "{svg}");
        assert!(svg.contains("2026-12-06 10:00:01 UTC"), "{svg}");
    }

    #[test]
    fn the_axis_top_is_a_round_number_over_the_largest_window() {
        assert_eq!(nice_ceiling(1.2), 2.0);
        assert_eq!(nice_ceiling(0.07), 0.1);
        assert_eq!(nice_ceiling(5.0), 5.0);
        assert_eq!(nice_ceiling(0.0), 1.0);
    }
}
