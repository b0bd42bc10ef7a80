//! `trace` for a person at a terminal: filters by namespace, pod, container and port,
//! and a column format with local times (`--format table`), the way `ig trace tcp` or
//! `kubectl get -w` read. JSON lines stay the default when stdout is not a terminal.

use std::net::SocketAddr;

use super::record::TraceRecord;
use crate::ingest::events::Kind;

/// `trace --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TraceFormat {
    /// One JSON object per line (the stable interface).
    Json,
    /// Aligned columns with local times.
    Table,
}

impl TraceFormat {
    /// `--format` when given, else a table on a terminal and JSON lines otherwise.
    pub fn resolve(given: Option<TraceFormat>, stdout_is_terminal: bool) -> TraceFormat {
        given.unwrap_or(if stdout_is_terminal {
            TraceFormat::Table
        } else {
            TraceFormat::Json
        })
    }
}

/// Which events to print; an empty list lets everything through.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceFilter {
    pub namespaces: Vec<String>,
    pub pods: Vec<String>,
    pub containers: Vec<String>,
    pub ports: Vec<u16>,
}

fn port_of(addr: &Option<String>) -> Option<u16> {
    addr.as_deref()
        .and_then(|a| a.parse::<SocketAddr>().ok())
        .map(|a| a.port())
}

impl TraceFilter {
    /// Whether names must be known before an event can be judged.
    pub fn needs_names(&self) -> bool {
        !(self.namespaces.is_empty() && self.pods.is_empty() && self.containers.is_empty())
    }

    pub fn matches(&self, r: &TraceRecord) -> bool {
        let one_of = |wanted: &[String], have: &Option<String>| {
            wanted.is_empty() || have.as_ref().is_some_and(|h| wanted.contains(h))
        };
        let a = &r.attribution;
        let ports = || {
            // listen/listen_closed: the listening port; refused: dialed or redirected.
            let local = r.local_dst.clone().flatten();
            [port_of(&r.dst), port_of(&local)]
                .into_iter()
                .chain(
                    (!matches!(r.kind, Kind::Refused | Kind::UdpRefused)).then(|| port_of(&r.src)),
                )
                .flatten()
                .any(|p| self.ports.contains(&p))
        };
        one_of(&self.namespaces, &a.namespace)
            && one_of(&self.pods, &a.pod)
            && one_of(&self.containers, &a.container)
            && (self.ports.is_empty() || ports())
    }
}

/// Column widths; longer values are cut with `…` so the columns stay aligned.
const COLUMNS: [(&str, usize); 8] = [
    ("TIME", 12),
    ("KIND", 13),
    ("NAMESPACE", 14),
    ("POD", 28),
    ("CONTAINER", 16),
    ("PID", 7),
    ("COMM", 15),
    ("ADDRESS", 0),
];

fn cell(s: &str, width: usize) -> String {
    if width == 0 {
        return s.to_string();
    }
    let n = s.chars().count();
    if n > width {
        let cut: String = s.chars().take(width - 1).collect();
        format!("{cut}…")
    } else {
        format!("{s:<width$}")
    }
}

pub fn header() -> String {
    let cells: Vec<String> = COLUMNS.iter().map(|(h, w)| cell(h, *w)).collect();
    cells.join(" ").trim_end().to_string()
}

/// `HH:MM:SS.mmm` of `unix_ns` at UTC offset `offset_s`.
pub fn clock_time(unix_ns: i128, offset_s: i64) -> String {
    let ms_total = (unix_ns.div_euclid(1_000_000)) as i64 + offset_s * 1000;
    let ms_of_day = ms_total.rem_euclid(86_400_000);
    let (h, m, s, ms) = (
        ms_of_day / 3_600_000,
        ms_of_day / 60_000 % 60,
        ms_of_day / 1000 % 60,
        ms_of_day % 1000,
    );
    format!("{h:02}:{m:02}:{s:02}.{ms:03}")
}

/// One table line: `-` for what is unknown; the address column says what the kind
/// means (`→ dst` for a refusal, `⇒ local` when redirected, `listen src`).
pub fn row(r: &TraceRecord, unix_ns: i128, offset_s: i64) -> String {
    let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let a = &r.attribution;
    let address = match r.kind {
        Kind::Refused | Kind::UdpRefused => {
            let mut s = format!("{} → {}", dash(&r.src), r.dst.as_deref().unwrap_or("?"));
            if let Some(Some(local)) = &r.local_dst {
                s.push_str(&format!(" ⇒ {local}"));
            }
            s
        }
        Kind::Listen | Kind::ListenClosed => dash(&r.src),
        _ => dash(&r.cgroup_path),
    };
    let values = [
        clock_time(unix_ns, offset_s),
        r.kind.name().to_string(),
        dash(&a.namespace),
        dash(&a.pod),
        dash(&a.container),
        r.tgid.map_or_else(|| "-".into(), |p| p.to_string()),
        dash(&r.comm),
        address,
    ];
    let cells: Vec<String> = values
        .iter()
        .zip(COLUMNS)
        .map(|(v, (_, w))| cell(v, w))
        .collect();
    cells.join(" ").trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::Attribution;

    fn record(kind: Kind, src: &str, dst: Option<&str>, local: Option<&str>) -> TraceRecord {
        TraceRecord {
            kind,
            ts: "2026-11-29T10:00:00.123456789Z".into(),
            cgroup_id: 7,
            cgroup_path: Some("/kubepods.slice/x".into()),
            attribution: Attribution {
                namespace: Some("shop".into()),
                pod: Some("checkout-7d4b9c8f5-abcde".into()),
                container: Some("app".into()),
                ..Attribution::default()
            },
            pid: Some(11),
            tgid: Some(10),
            comm: Some("sr-app".into()),
            family: Some("ipv4"),
            src: Some(src.into()),
            dst: dst.map(Into::into),
            local_dst: (kind == Kind::Refused).then(|| local.map(Into::into)),
            socket: None,
        }
    }

    #[test]
    fn filters_by_names_and_ports() {
        let refused = record(
            Kind::Refused,
            "127.0.0.1:40000",
            Some("10.96.0.10:80"),
            Some("127.0.0.1:15001"),
        );
        let listen = record(Kind::Listen, "127.0.0.1:15001", None, None);
        let all = TraceFilter::default();
        assert!(all.matches(&refused) && !all.needs_names());
        let port = TraceFilter {
            ports: vec![15001],
            ..Default::default()
        };
        assert!(port.matches(&refused), "the redirected port counts");
        assert!(port.matches(&listen), "the listening port");
        let dialed = TraceFilter {
            ports: vec![80],
            ..Default::default()
        };
        assert!(dialed.matches(&refused) && !dialed.matches(&listen));
        let client_port = TraceFilter {
            ports: vec![40000],
            ..Default::default()
        };
        assert!(
            !client_port.matches(&refused),
            "a refusal's own ephemeral port is no match"
        );
        let ns = TraceFilter {
            namespaces: vec!["shop".into()],
            containers: vec!["app".into()],
            ..Default::default()
        };
        assert!(ns.matches(&refused) && ns.needs_names());
        let other = TraceFilter {
            pods: vec!["other".into()],
            ..Default::default()
        };
        assert!(!other.matches(&refused));
        let mut unnamed = refused;
        unnamed.attribution = Attribution::default();
        assert!(!ns.matches(&unnamed), "unknown names match no name filter");
    }

    #[test]
    fn table_rows_are_aligned_with_local_times() {
        assert_eq!(clock_time(1_767_000_000_123_000_000, 0), "09:20:00.123");
        assert_eq!(clock_time(1_767_000_000_123_000_000, 3600), "10:20:00.123");
        assert_eq!(
            clock_time(1_767_000_000_123_000_000, -36_000),
            "23:20:00.123"
        );
        let r = record(
            Kind::Refused,
            "127.0.0.1:40000",
            Some("10.96.0.10:80"),
            Some("127.0.0.1:15001"),
        );
        let line = row(&r, 1_767_000_000_123_000_000, 0);
        let h = header();
        assert_eq!(
            line.find("refused"),
            h.find("KIND"),
            "columns line up:\n{h}\n{line}"
        );
        assert_eq!(line.find("shop"), h.find("NAMESPACE"));
        assert_eq!(line.find("sr-app"), h.find("COMM"));
        assert!(
            line.ends_with("127.0.0.1:40000 → 10.96.0.10:80 ⇒ 127.0.0.1:15001"),
            "{line}"
        );
        let mut long = record(Kind::Listen, "127.0.0.1:15001", None, None);
        long.attribution.pod = Some("a-very-long-pod-name-that-does-not-fit-its-column".into());
        let line = row(&long, 0, 0);
        // Columns are counted in characters (`…` is one).
        let column = |s: &str, needle: &str| s[..s.find(needle).unwrap()].chars().count();
        assert_eq!(
            column(&line, "sr-app"),
            column(&h, "COMM"),
            "a long value is cut:\n{h}\n{line}"
        );
        assert!(line.contains("…"));
    }

    #[test]
    fn format_defaults_to_json_unless_a_terminal() {
        assert_eq!(TraceFormat::resolve(None, false), TraceFormat::Json);
        assert_eq!(TraceFormat::resolve(None, true), TraceFormat::Table);
        assert_eq!(
            TraceFormat::resolve(Some(TraceFormat::Json), true),
            TraceFormat::Json
        );
    }
}
