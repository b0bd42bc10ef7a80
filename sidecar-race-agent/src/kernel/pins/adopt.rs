//! Adopting what an earlier agent of the same build pinned: its maps, checked against
//! the shapes it recorded, its links (each must be there), and their programs (for
//! their skipped-run counts).
//! Nothing is loaded or attached: the programs never stopped.

use std::{os::fd::OwnedFd, path::Path};

use aya::{
    maps::{Map, MapData},
    programs::links::PinnedLink,
};

use super::{
    bpffs,
    error::PinError,
    manifest::{MAPS, Manifest, MapPin},
};

/// The pinned state, opened.
pub struct Adopted {
    maps: Vec<(String, MapData)>,
    /// Each link's program, by its name in the object, with an fd of it.
    pub programs: Vec<(String, OwnedFd)>,
}

impl Adopted {
    /// Opens every pin `manifest` lists under `dir`; fails on a missing pin or a map
    /// whose shape is not the recorded one.
    pub fn open(dir: &Path, manifest: &Manifest) -> Result<Self, PinError> {
        if manifest.links.is_empty() {
            return Err(PinError::Io("the manifest lists no links".into()));
        }
        // A manifest that lists fewer maps than this build reads (edited, or cut)
        // is not adopted: the probes would miss one.
        if let Some(missing) = MAPS
            .iter()
            .find(|name| !manifest.maps.iter().any(|m| m.name == **name))
        {
            return Err(PinError::Io(format!("the manifest lists no {missing} map")));
        }
        let mut maps = Vec::new();
        for want in &manifest.maps {
            let path = dir.join("maps").join(&want.name);
            let got = map_info(&path)?;
            if got.map_type != want.map_type
                || got.key_size != want.key_size
                || got.value_size != want.value_size
                || got.max_entries != want.max_entries
            {
                return Err(PinError::Shape {
                    map: want.name.clone(),
                    want: describe(want),
                    got: describe(&got),
                });
            }
            let data = MapData::from_pin(&path)
                .map_err(|e| PinError::Io(format!("open map {}: {e}", want.name)))?;
            maps.push((want.name.clone(), data));
        }
        let mut programs = Vec::new();
        for l in &manifest.links {
            let path = dir.join("links").join(&l.file);
            PinnedLink::from_pin(&path)
                .map_err(|e| PinError::Io(format!("open link {}: {e}", l.file)))?;
            if programs.iter().any(|(p, _)| p == &l.program) {
                continue;
            }
            let prog = bpffs::open_pin(&dir.join("progs").join(&l.program))
                .map_err(|e| PinError::Io(format!("open program {}: {e}", l.program)))?;
            programs.push((l.program.clone(), prog));
        }
        Ok(Self { maps, programs })
    }

    /// Map `name`, once.
    pub fn take(&mut self, name: &str) -> Option<Map> {
        let i = self.maps.iter().position(|(n, _)| n == name)?;
        Map::from_map_data(self.maps.swap_remove(i).1).ok()
    }
}

/// The shape of the map pinned at `path` (its name left empty).
pub fn map_info(path: &Path) -> Result<MapPin, PinError> {
    let info = aya::maps::MapInfo::from_pin(path)
        .map_err(|e| PinError::Io(format!("{}: {e}", path.display())))?;
    Ok(MapPin {
        name: String::new(),
        map_type: info
            .map_type()
            .map_or_else(|e| format!("unknown ({e})"), |t| format!("{t:?}")),
        key_size: info.key_size(),
        value_size: info.value_size(),
        max_entries: info.max_entries(),
    })
}

fn describe(m: &MapPin) -> String {
    format!(
        "{} of {} entries, keys {} and values {} bytes",
        m.map_type, m.max_entries, m.key_size, m.value_size
    )
}
