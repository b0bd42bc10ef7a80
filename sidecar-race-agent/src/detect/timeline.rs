//! An incident's timeline: what the agent saw in its pod around the refusals, in time
//! order (container starts, the sidecar's listen and close, the first and last
//! refusal with the counts between, the pod's deletion, probe results), bounded.

use serde::{Deserialize, Serialize};

/// Entries an incident keeps: past it, the earliest [`HEAD`] and the latest stay and
/// the ones between are counted as dropped (a crash loop's starts, a flapping probe).
pub const MAX_ENTRIES: usize = 32;
/// Earliest entries kept when the bound is hit: what led up to the first refusal.
pub const HEAD: usize = 16;

/// What an entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum EntryKind {
    /// A container instance started (its cgroup made, or the pod source's `startedAt`).
    ContainerStarted,
    /// The incident's first refusal.
    FirstRefusal,
    /// Refusals since the previous entry, at the last of them (other entries came
    /// between the first and the last refusal).
    Refusals,
    /// The latest refusal, with the refusals since the previous entry.
    LastRefusal,
    /// A listener on the refused port or socket came up and ended the refusals.
    Listening,
    /// The listener the client was served by went away.
    ListenerClosed,
    /// The pod's deletion began (its `deletionTimestamp` less its grace period), or
    /// the pod source stopped reporting it.
    PodDeleted,
    /// A container's `started` (its startupProbe's result) changed.
    Started,
    /// A container's `ready` (its readinessProbe's result) changed.
    Ready,
    /// Shown only: where the bound left entries out, and how many.
    Dropped,
}

impl EntryKind {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn is_refusal(self) -> bool {
        matches!(
            self,
            EntryKind::FirstRefusal | EntryKind::Refusals | EntryKind::LastRefusal
        )
    }
}

/// Who said a container started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StartSource {
    /// The kernel: its cgroup was made while the agent watched.
    Kernel,
    /// The pod source: the status' `startedAt` (whole seconds).
    Pod,
}

/// One thing seen, at a kernel boot-clock time in ns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub kind: EntryKind,
    pub at: u64,
    /// The container it is about, by runtime id, when known.
    #[serde(default)]
    pub container_id: Option<String>,
    /// Its name, when the pod source had named it by then (else named when shown).
    #[serde(default)]
    pub container: Option<String>,
    /// `container_started` only.
    #[serde(default)]
    pub source: Option<StartSource>,
    /// Refusal entries: the refusals this entry stands for.
    #[serde(default)]
    pub count: u64,
    /// `pod_deleted` only: the deletion's grace period, when the pod source showed it.
    #[serde(default)]
    pub grace_seconds: Option<i64>,
    /// `started` and `ready` only: the new value.
    #[serde(default)]
    pub value: Option<bool>,
}

impl Entry {
    /// An entry of `kind` at `at`, with nothing else yet.
    pub fn new(kind: EntryKind, at: u64) -> Entry {
        Entry {
            kind,
            at,
            container_id: None,
            container: None,
            source: None,
            count: 0,
            grace_seconds: None,
            value: None,
        }
    }

    /// About container `id` (named `name` when known).
    pub fn of(mut self, id: Option<String>, name: Option<String>) -> Entry {
        self.container_id = id;
        self.container = name;
        self
    }
}

/// Entries left out between the earliest and the latest kept.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gap {
    /// Where they were: before `entries[index]`.
    pub index: usize,
    pub entries: u64,
    /// The refusals the dropped refusal entries stood for.
    pub refused: u64,
    /// The earliest dropped entry's time.
    pub first_at: u64,
}

/// An incident's entries in time order (ties in the order they were seen), at most
/// [`MAX_ENTRIES`]. The refusal entries' counts plus the gap's add up to the
/// incident's `refused_count`.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timeline {
    entries: Vec<Entry>,
    #[serde(default)]
    gap: Option<Gap>,
    /// The pod's deletion was written (it stays so when the bound drops its entry:
    /// what the pod source shows every tick is not written again).
    #[serde(default)]
    deletion_seen: bool,
}

impl Timeline {
    /// A timeline that starts with the first refusal, at `at`.
    pub fn first_refusal(at: u64, client: Option<String>) -> Timeline {
        let mut first = Entry::new(EntryKind::FirstRefusal, at).of(client, None);
        first.count = 1;
        Timeline {
            entries: vec![first],
            ..Timeline::default()
        }
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn gap(&self) -> Option<&Gap> {
        self.gap.as_ref()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether an entry of `kind` about container `id` is kept (or `kind` at all, for
    /// `None`).
    pub fn has(&self, kind: EntryKind, id: Option<&str>) -> bool {
        self.entries
            .iter()
            .any(|e| e.kind == kind && (id.is_none() || e.container_id.as_deref() == id))
    }

    /// `count` refusals, the last at `at`: counted into the refusal entry just before
    /// that time when nothing else came between, else a new entry.
    pub fn refused(&mut self, at: u64, count: u64, client: Option<&str>) {
        if count == 0 {
            return;
        }
        let pos = self.position(at);
        if let Some(prev) = pos.checked_sub(1).map(|i| &mut self.entries[i])
            && matches!(prev.kind, EntryKind::Refusals | EntryKind::LastRefusal)
        {
            prev.count += count;
            prev.at = prev.at.max(at);
            return;
        }
        let mut e = Entry::new(EntryKind::LastRefusal, at).of(client.map(str::to_string), None);
        e.count = count;
        self.insert_at(pos, e);
        self.label_refusals();
    }

    /// Adds `e` in time order (after the entries of the same time).
    pub fn add(&mut self, e: Entry) {
        let pos = self.position(e.at);
        self.insert_at(pos, e);
        // A refusal tally split by the new entry stays one: the labels follow order.
        self.label_refusals();
    }

    /// Writes the pod's deletion `e`, once.
    pub fn deleted(&mut self, e: Entry) {
        if !self.deletion_seen {
            self.deletion_seen = true;
            self.add(e);
        }
    }

    /// Whether the bound has dropped entries.
    pub fn is_full(&self) -> bool {
        self.gap.is_some()
    }

    /// Adds a container's start unless one of that instance is kept; the kernel's
    /// replaces the pod source's (to the nanosecond, and the earlier of the two).
    pub fn started(&mut self, at: u64, id: &str, name: Option<&str>, source: StartSource) {
        if let Some(i) = self.entries.iter().position(|e| {
            e.kind == EntryKind::ContainerStarted && e.container_id.as_deref() == Some(id)
        }) {
            if source == StartSource::Kernel && self.entries[i].source == Some(StartSource::Pod) {
                self.remove_at(i);
            } else {
                return;
            }
        }
        let mut e = Entry::new(EntryKind::ContainerStarted, at)
            .of(Some(id.to_string()), name.map(str::to_string));
        e.source = Some(source);
        self.add(e);
    }

    /// Names the entries about container `id` that were recorded before its name
    /// was known.
    pub fn name(&mut self, id: &str, name: &str) {
        for e in &mut self.entries {
            if e.container.is_none() && e.container_id.as_deref() == Some(id) {
                e.container = Some(name.to_string());
            }
        }
    }

    /// Container ids its entries name and have no name for yet.
    pub fn unnamed(&self) -> impl Iterator<Item = &str> {
        self.entries
            .iter()
            .filter(|e| e.container.is_none())
            .filter_map(|e| e.container_id.as_deref())
    }

    /// Takes in `other`'s entries (an incident merged into this one).
    pub fn absorb(&mut self, other: &Timeline) {
        for e in &other.entries {
            match e.kind {
                k if k.is_refusal() => self.refused(e.at, e.count, e.container_id.as_deref()),
                EntryKind::ContainerStarted => {
                    let (id, source) = (e.container_id.as_deref(), e.source);
                    if let (Some(id), Some(source)) = (id, source) {
                        self.started(e.at, id, e.container.as_deref(), source);
                    }
                }
                _ if self.entries.contains(e) => {}
                _ => self.add(e.clone()),
            }
        }
        if let Some(g) = other.gap {
            let gap = self.gap.get_or_insert(Gap {
                index: HEAD.min(self.entries.len()),
                first_at: g.first_at,
                ..Gap::default()
            });
            gap.entries += g.entries;
            gap.refused += g.refused;
            gap.first_at = gap.first_at.min(g.first_at);
        }
    }

    /// Where an entry at `at` goes: after every entry at or before it.
    fn position(&self, at: u64) -> usize {
        self.entries.partition_point(|e| e.at <= at)
    }

    fn insert_at(&mut self, pos: usize, e: Entry) {
        self.entries.insert(pos, e);
        if let Some(g) = &mut self.gap
            && pos < g.index
        {
            g.index += 1;
        }
        while self.entries.len() > MAX_ENTRIES {
            self.shed();
        }
    }

    fn remove_at(&mut self, i: usize) -> Entry {
        if let Some(g) = &mut self.gap
            && i < g.index
        {
            g.index -= 1;
        }
        self.entries.remove(i)
    }

    /// Drops one entry next to the gap: the newest of the earliest ones when more than
    /// [`HEAD`] of them are kept, else the oldest of the latest. Never the first
    /// refusal: on the latest side, the gap moves past it.
    fn shed(&mut self) {
        let first_refusal = self.entries.iter().position(|e| e.kind.is_refusal());
        let g = self.gap.get_or_insert(Gap {
            index: HEAD,
            ..Gap::default()
        });
        let not_first = |i: &usize| Some(*i) != first_refusal;
        let victim = match (HEAD..g.index).rev().find(not_first) {
            Some(head) => {
                g.index -= 1;
                head
            }
            None if Some(g.index) == first_refusal => {
                g.index += 1;
                g.index
            }
            None => g.index,
        };
        let e = self.entries.remove(victim);
        g.first_at = if g.entries == 0 {
            e.at
        } else {
            g.first_at.min(e.at)
        };
        g.entries += 1;
        if e.kind.is_refusal() {
            g.refused += e.count;
        }
    }

    /// The first refusal entry is `first_refusal`, the latest (when another)
    /// `last_refusal`, those between `refusals`.
    fn label_refusals(&mut self) {
        let idx: Vec<usize> = (0..self.entries.len())
            .filter(|i| self.entries[*i].kind.is_refusal())
            .collect();
        for (n, i) in idx.iter().enumerate() {
            self.entries[*i].kind = match n {
                0 => EntryKind::FirstRefusal,
                n if n + 1 == idx.len() => EntryKind::LastRefusal,
                _ => EntryKind::Refusals,
            };
        }
    }

    /// The refusals the entries and the gap stand for (the incident's count).
    pub fn refused_total(&self) -> u64 {
        self.entries
            .iter()
            .filter(|e| e.kind.is_refusal())
            .map(|e| e.count)
            .sum::<u64>()
            + self.gap.map_or(0, |g| g.refused)
    }
}
