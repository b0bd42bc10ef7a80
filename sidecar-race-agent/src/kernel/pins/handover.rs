//! A new build taking over from an old one's pins (another layout key). The new
//! programs are attached before the old ones are unpinned, so for a moment both
//! record: the old rings hold everything up to the cut (the moment the last new
//! program was attached) and the new rings everything after it. What the old rings
//! hold before the cut is read once, and the new rings' records before it are
//! duplicates to drop. Only a build with the same record layout reads old rings;
//! another loses what the old agent left unread (said in the log).

use aya::maps::{Map, MapData, RingBuf};

use super::{key::abi_digest, place::Pins};
use crate::ingest::events::{Decoder, KernelEvent};

/// The rings of earlier builds' pins, held open so they outlive the unpinning.
#[derive(Default)]
pub struct OldRings {
    rings: Vec<(String, RingBuf<MapData>)>,
    /// Keys whose rings this build cannot read.
    pub unreadable: Vec<String>,
}

/// What the old rings held before the cut.
#[derive(Debug, Default)]
pub struct Handover {
    /// Oldest first per ring; the pipeline puts them in time order.
    pub events: Vec<KernelEvent>,
    /// Records in the new rings older than this are the old rings' duplicates.
    pub cut_boot_ns: u64,
    /// Records after the cut the old programs wrote while both were attached.
    pub duplicates_skipped: usize,
}

impl OldRings {
    /// Opens the refusal and control rings of every key but `keep` whose manifest
    /// has this build's record layout.
    pub fn open(pins: &Pins, keep: &str) -> Self {
        let mut out = Self::default();
        for key in pins.keys().into_iter().filter(|k| k != keep) {
            let readable = pins
                .manifest(&key)
                .ok()
                .flatten()
                .is_some_and(|m| m.abi == abi_digest());
            if !readable {
                out.unreadable.push(key);
                continue;
            }
            for ring in ["CONTROL", "EVENTS"] {
                let path = pins.dir(&key).join("maps").join(ring);
                let opened = MapData::from_pin(&path)
                    .ok()
                    .and_then(|m| Map::from_map_data(m).ok())
                    .and_then(|m| RingBuf::try_from(m).ok());
                match opened {
                    Some(r) => out.rings.push((key.clone(), r)),
                    None => tracing::warn!("cannot open {}: its records are lost", path.display()),
                }
            }
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.rings.is_empty()
    }

    /// Every record the old rings hold from before `cut_boot_ns` (call it once their
    /// programs are detached, so nothing more comes).
    pub fn drain(mut self, cut_boot_ns: u64) -> Handover {
        let mut decoder = Decoder::default();
        let mut h = Handover {
            cut_boot_ns,
            ..Handover::default()
        };
        for (key, ring) in &mut self.rings {
            let mut undecodable = 0;
            while let Some(item) = ring.next() {
                match decoder.decode(&item) {
                    Ok(ev) if ev.ts_boot_ns() < cut_boot_ns => h.events.push(ev),
                    Ok(_) => h.duplicates_skipped += 1,
                    Err(_) => undecodable += 1,
                }
            }
            if undecodable > 0 {
                tracing::warn!(%key, undecodable, "records of an earlier build could not be read");
            }
        }
        h
    }
}
