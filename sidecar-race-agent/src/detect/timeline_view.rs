//! An incident's timeline as users see it: each entry with its wall-clock time and
//! its container named from the pod metadata (`/api/v1/incidents`), and the short
//! form an Event's note and an OTLP record's body carry (times relative to the first
//! entry).

use serde::Serialize;

use super::timeline::{EntryKind, StartSource, Timeline};
use crate::pods::pod_meta::PodMeta;

/// One entry in the public JSON shape (field names are a stable interface; the
/// fields a kind does not have are left out).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TimelineEntryView {
    pub kind: EntryKind,
    /// RFC 3339, ns.
    pub at: String,
    /// The same time in the kernel's boot clock, for relative times.
    #[serde(skip)]
    pub at_ns: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    /// `container_started`: `kernel` or `pod`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<StartSource>,
    /// Refusal entries: the refusals since the previous entry (1 for the first);
    /// `dropped`: the entries left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// `dropped`: the refusals the entries left out counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<u64>,
    /// `pod_deleted`: its grace period, when the pod showed its deletion.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grace_seconds: Option<i64>,
    /// `started`, `ready`: the new value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<bool>,
}

/// `tl`'s entries, named from `meta` where the incident did not keep a name, the
/// gap (if the bound was hit) as one `dropped` entry where it was.
pub fn entries(
    tl: &Timeline,
    meta: &dyn PodMeta,
    wall: &dyn Fn(u64) -> String,
) -> Vec<TimelineEntryView> {
    let mut out: Vec<TimelineEntryView> = tl
        .entries()
        .iter()
        .map(|e| TimelineEntryView {
            kind: e.kind,
            at: wall(e.at),
            at_ns: e.at,
            container: e.container.clone().or_else(|| {
                let id = e.container_id.as_deref()?;
                meta.container_name(id).map(str::to_string)
            }),
            container_id: e.container_id.clone(),
            source: e.source,
            count: e.kind.is_refusal().then_some(e.count),
            refused: None,
            grace_seconds: e.grace_seconds,
            value: e.value,
        })
        .collect();
    if let Some(g) = tl.gap() {
        let marker = TimelineEntryView {
            kind: EntryKind::Dropped,
            at: wall(g.first_at),
            at_ns: g.first_at,
            container: None,
            container_id: None,
            source: None,
            count: Some(g.entries),
            refused: Some(g.refused),
            grace_seconds: None,
            value: None,
        };
        out.insert(g.index.min(out.len()), marker);
    }
    out
}

/// The short form, within `max` bytes: `app started +0.00s, first refusal +0.12s,
/// proxy listening +1.46s`. Starts of containers nobody named (the pod's sandbox) are
/// left out; past `max`, whole items are, and `…` ends it. Empty without entries.
pub fn short(entries: &[TimelineEntryView], max: usize) -> String {
    let Some(origin) = entries.first().map(|e| e.at_ns) else {
        return String::new();
    };
    const MORE: &str = ", …";
    let mut out = String::new();
    for e in entries {
        let Some(what) = item(e) else { continue };
        let secs = e.at_ns.saturating_sub(origin) as f64 / 1e9;
        let item = match e.kind {
            EntryKind::Dropped => what,
            _ => format!("{what} +{secs:.2}s"),
        };
        let sep = if out.is_empty() { "" } else { ", " };
        if out.len() + sep.len() + item.len() + MORE.len() > max {
            if !out.is_empty() {
                out.push_str(MORE);
            }
            break;
        }
        out.push_str(sep);
        out.push_str(&item);
    }
    out
}

/// One entry in words, without its time.
fn item(e: &TimelineEntryView) -> Option<String> {
    let who = e.container.as_deref();
    let count = e.count.unwrap_or(0);
    Some(match e.kind {
        EntryKind::Dropped => format!("({count} entries dropped)"),
        EntryKind::ContainerStarted => format!("{} started", who?),
        EntryKind::FirstRefusal => "first refusal".into(),
        EntryKind::Refusals => format!("{count} refused"),
        EntryKind::LastRefusal => format!("last refusal ({count} since the previous)"),
        EntryKind::Listening => who.map_or("listener up".into(), |w| format!("{w} listening")),
        EntryKind::ListenerClosed => {
            who.map_or("listener closed".into(), |w| format!("{w} closed"))
        }
        EntryKind::PodDeleted => match e.grace_seconds {
            Some(g) => format!("pod deleted (grace {g}s)"),
            None => "pod deleted".into(),
        },
        EntryKind::Started => match e.value {
            Some(true) => format!("{} started", who.unwrap_or("a container")),
            _ => format!("{} not started", who.unwrap_or("a container")),
        },
        EntryKind::Ready => match e.value {
            Some(true) => format!("{} ready", who.unwrap_or("a container")),
            _ => format!("{} not ready", who.unwrap_or("a container")),
        },
    })
}
