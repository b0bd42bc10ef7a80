//! `timeline`'s text for a terminal: per incident a header line, then each timeline
//! entry on a line of its own, its time relative to the first entry beside its wall
//! time. It reads the incidents' JSON as the API gives it (docs/reference.md, "The
//! timeline"), so a field or kind a newer agent adds is shown, not refused.

use serde::Deserialize;
use serde_json::Value;

use super::pod_timeline::PodTimelines;

/// The fields of an incident the text shows.
#[derive(Debug, Deserialize)]
struct Incident {
    id: u64,
    #[serde(default)]
    kind: String,
    phase: String,
    state: String,
    #[serde(default)]
    container: Option<String>,
    #[serde(default)]
    sidecar: Option<String>,
    #[serde(default)]
    port: Option<u16>,
    #[serde(default)]
    socket: Option<Socket>,
    #[serde(default)]
    protocol: Option<String>,
    refused_count: u64,
    #[serde(default)]
    timeline: Vec<Entry>,
}

#[derive(Debug, Deserialize)]
struct Socket {
    path: String,
}

/// One timeline entry; the fields its kind lacks are absent.
#[derive(Debug, Deserialize)]
struct Entry {
    kind: String,
    at: String,
    #[serde(default)]
    container: Option<String>,
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    count: Option<u64>,
    #[serde(default)]
    refused: Option<u64>,
    #[serde(default)]
    grace_seconds: Option<i64>,
    #[serde(default)]
    value: Option<bool>,
}

/// The whole text: what was read from where, then each incident.
pub fn render(t: &PodTimelines) -> String {
    let who = format!(
        "pod {}/{} (uid {}) on node {}",
        t.namespace, t.pod, t.uid, t.node
    );
    if t.incidents.is_empty() {
        return format!("no incidents for {who} (agent {})\n", t.agent);
    }
    let n = t.incidents.len();
    let mut out = format!(
        "{who}, agent {}: {n} incident{}\n",
        t.agent,
        if n == 1 { "" } else { "s" }
    );
    if t.truncated {
        out.push_str(
            "(the agent holds more of the namespace's incidents than one answer carries: older ones may be missing)\n",
        );
    }
    for incident in &t.incidents {
        out.push('\n');
        out.push_str(&incident_text(incident));
    }
    out
}

/// One incident: its header line and its entries.
fn incident_text(value: &Value) -> String {
    let i: Incident = match serde_json::from_value(value.clone()) {
        Ok(i) => i,
        Err(e) => return format!("incident {}: not readable ({e})\n", value["id"]),
    };
    let mut out = header(&i) + "\n";
    let origin = i.timeline.first().and_then(|e| nanos(&e.at));
    let width = i
        .timeline
        .iter()
        .map(|e| e.container.as_deref().unwrap_or("-").chars().count())
        .max()
        .unwrap_or(1);
    if i.timeline.is_empty() {
        out.push_str("  (no timeline: a stuck Job, or an incident restored from an older agent)\n");
    }
    for e in &i.timeline {
        let relative = match (origin, nanos(&e.at)) {
            (Some(o), Some(t)) => format!("{:+.3}s", (t - o) as f64 / 1e9),
            _ => "?".into(),
        };
        let line = format!(
            "  {relative:>9}  {:<30}  {:<17}  {:<width$}  {}",
            e.at,
            words(&e.kind),
            e.container.as_deref().unwrap_or("-"),
            detail(e),
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `incident 7  startup  resolved  sidecar_race  app → istio-proxy  port 15001 (tcp)  12 refusals`.
fn header(i: &Incident) -> String {
    let target = match (&i.socket, i.port) {
        (Some(s), _) => format!("socket {}", s.path),
        (None, Some(p)) => format!("port {p}"),
        (None, None) => "no port".into(),
    };
    let protocol = i
        .protocol
        .as_deref()
        .map(|p| format!(" ({p})"))
        .unwrap_or_default();
    let kind = if i.kind.is_empty() {
        "sidecar_race"
    } else {
        &i.kind
    };
    format!(
        "incident {}  {}  {}  {kind}  {} → {}  {target}{protocol}  {}",
        i.id,
        i.phase,
        i.state,
        i.container.as_deref().unwrap_or("?"),
        i.sidecar.as_deref().unwrap_or("?"),
        plural(i.refused_count, "refusal"),
    )
}

/// An entry's kind in words; a kind this build does not know, as the agent named it.
pub fn words(kind: &str) -> String {
    match kind {
        "container_started" => "container started",
        "first_refusal" => "first refusal",
        "refusals" => "refusals",
        "last_refusal" => "last refusal",
        "listening" => "listening",
        "listener_closed" => "listener closed",
        "pod_deleted" => "pod deleted",
        "started" => "started",
        "ready" => "ready",
        "dropped" => "entries dropped",
        other => return other.replace('_', " "),
    }
    .to_string()
}

/// What the entry's kind carries: a start's source, a refusal entry's count, a
/// deletion's grace, a probe's new value, what the bound dropped.
fn detail(e: &Entry) -> String {
    match e.kind.as_str() {
        "container_started" => e
            .source
            .as_deref()
            .map(|s| format!("source {s}"))
            .unwrap_or_default(),
        "first_refusal" | "refusals" | "last_refusal" => {
            e.count.map(|c| plural(c, "refusal")).unwrap_or_default()
        }
        "pod_deleted" => match e.grace_seconds {
            Some(g) => format!("grace {g}s"),
            None => "no deletion shown (forced)".into(),
        },
        "started" | "ready" => e.value.map(|v| format!("{v}")).unwrap_or_default(),
        "dropped" => format!(
            "{}, {}",
            plural(e.count.unwrap_or(0), "entry"),
            plural(e.refused.unwrap_or(0), "refusal")
        ),
        _ => String::new(),
    }
}

fn plural(n: u64, one: &str) -> String {
    match (n, one) {
        (1, _) => format!("1 {one}"),
        (_, "entry") => format!("{n} entries"),
        _ => format!("{n} {one}s"),
    }
}

/// An RFC 3339 time as ns since the epoch (the html page places entries by it too).
pub fn nanos(at: &str) -> Option<i128> {
    at.parse::<jiff::Timestamp>()
        .ok()
        .map(|t| t.as_nanosecond())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn timelines(incidents: Vec<Value>) -> PodTimelines {
        PodTimelines {
            namespace: "shop".into(),
            pod: "checkout-1".into(),
            uid: "u-1".into(),
            node: "node-a".into(),
            agent: "sidecar-race/agent-a".into(),
            incidents,
            truncated: false,
        }
    }

    /// A drain's incident whose timeline holds every kind of entry, in the agent's order.
    fn every_kind() -> Value {
        let at = |s: u32, ms: u32| format!("2026-12-06T10:00:{s:02}.{ms:03}000000Z");
        json!({
            "id": 7, "kind": "sidecar_race", "phase": "drain", "state": "resolved",
            "container": "app", "sidecar": "envoy", "port": 15001, "protocol": "tcp",
            "refused_count": 45, "pod_uid": "u-1",
            "timeline": [
                {"kind": "container_started", "at": at(0, 0), "container": "app", "source": "kernel"},
                {"kind": "container_started", "at": at(0, 250), "container": "envoy", "source": "pod"},
                {"kind": "ready", "at": at(1, 0), "container": "envoy", "value": true},
                {"kind": "started", "at": at(1, 500), "container": "envoy", "value": false},
                {"kind": "dropped", "at": at(2, 0), "count": 3, "refused": 30},
                {"kind": "pod_deleted", "at": at(10, 0), "grace_seconds": 30},
                {"kind": "listener_closed", "at": at(10, 100), "container": "envoy"},
                {"kind": "first_refusal", "at": at(10, 120), "container": "app", "count": 1},
                {"kind": "refusals", "at": at(10, 200), "container": "app", "count": 4},
                {"kind": "listening", "at": at(11, 0), "container": "envoy"},
                {"kind": "last_refusal", "at": at(12, 5), "container": "app", "count": 10},
                {"kind": "pod_deleted", "at": at(13, 0)}
            ]
        })
    }

    #[test]
    fn every_entry_kind_in_order_with_its_relative_time_and_detail() {
        let text = render(&timelines(vec![every_kind()]));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "pod shop/checkout-1 (uid u-1) on node node-a, agent sidecar-race/agent-a: 1 incident"
        );
        assert_eq!(
            lines[2],
            "incident 7  drain  resolved  sidecar_race  app → envoy  port 15001 (tcp)  45 refusals"
        );
        let t = "2026-12-06T10:00:";
        let expected = [
            format!("    +0.000s  {t}00.000000000Z  container started  app    source kernel"),
            format!("    +0.250s  {t}00.250000000Z  container started  envoy  source pod"),
            format!("    +1.000s  {t}01.000000000Z  ready              envoy  true"),
            format!("    +1.500s  {t}01.500000000Z  started            envoy  false"),
            format!(
                "    +2.000s  {t}02.000000000Z  entries dropped    -      3 entries, 30 refusals"
            ),
            format!("   +10.000s  {t}10.000000000Z  pod deleted        -      grace 30s"),
            format!("   +10.100s  {t}10.100000000Z  listener closed    envoy"),
            format!("   +10.120s  {t}10.120000000Z  first refusal      app    1 refusal"),
            format!("   +10.200s  {t}10.200000000Z  refusals           app    4 refusals"),
            format!("   +11.000s  {t}11.000000000Z  listening          envoy"),
            format!("   +12.005s  {t}12.005000000Z  last refusal       app    10 refusals"),
            format!(
                "   +13.000s  {t}13.000000000Z  pod deleted        -      no deletion shown (forced)"
            ),
        ];
        assert_eq!(lines[3..], expected, "{text}");
    }

    #[test]
    fn a_socket_incident_and_one_without_timeline() {
        let socket = json!({
            "id": 9, "kind": "sidecar_race", "phase": "startup", "state": "open",
            "container": "app", "sidecar": "otelcol", "port": null,
            "socket": {"path": "/var/run/otel/otlp.sock", "volume": "otel", "abstract": false},
            "protocol": "unix", "refused_count": 1, "timeline": []
        });
        let text = render(&timelines(vec![socket]));
        assert!(
            text.contains("incident 9  startup  open  sidecar_race  app → otelcol  socket /var/run/otel/otlp.sock (unix)  1 refusal\n  (no timeline"),
            "{text}"
        );
    }

    #[test]
    fn no_incidents_is_one_sentence() {
        assert_eq!(
            render(&timelines(vec![])),
            "no incidents for pod shop/checkout-1 (uid u-1) on node node-a (agent sidecar-race/agent-a)\n"
        );
    }

    #[test]
    fn a_kind_of_a_newer_agent_is_shown_in_words() {
        let mut i = every_kind();
        i["timeline"] = json!([{"kind": "sidecar_restarted", "at": "2026-12-06T10:00:00Z"}]);
        let text = render(&timelines(vec![i]));
        assert!(text.contains("+0.000s  2026-12-06T10:00:00Z"), "{text}");
        assert!(text.contains("sidecar restarted"), "{text}");
    }
}
