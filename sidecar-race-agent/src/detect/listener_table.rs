//! A pod's listener records, indexed by port so a refusal looks at its port's records
//! only, and bounded: open listeners beyond a cap are not tracked (and counted), and
//! of closed ones only the last per address and the newest beyond a cap are kept.

use std::{
    collections::{BTreeSet, HashMap},
    net::SocketAddr,
};

use serde::{Deserialize, Serialize};

use super::listeners::Listener;

/// Open listeners tracked per pod at most (a pod listening on thousands of ports).
pub const OPEN_LISTENERS_PER_POD: usize = 1_024;
/// Closed listener records kept per pod at most (ephemeral listeners coming and going).
pub const CLOSED_LISTENERS_PER_POD: usize = 256;

#[derive(Default, Clone, Serialize, Deserialize)]
pub struct ListenerTable {
    by_port: HashMap<u16, Vec<Listener>>,
    open: usize,
    /// (down_at, address) of closed records, oldest first.
    closed: BTreeSet<(u64, SocketAddr)>,
}

impl ListenerTable {
    /// Records a listener coming up. False when the pod already has the maximum of
    /// open listeners: it is not tracked.
    pub fn up(&mut self, addr: SocketAddr, container_id: Option<String>, ts: u64) -> bool {
        if self.open >= OPEN_LISTENERS_PER_POD {
            return false;
        }
        self.forget_old(addr);
        self.by_port.entry(addr.port()).or_default().push(Listener {
            addr,
            container_id,
            up_at: Some(ts),
            down_at: None,
        });
        self.open += 1;
        true
    }

    /// Records a listener going away: the newest open one of `addr`, or a record of
    /// a listener the agent never saw come up.
    pub fn down(&mut self, addr: SocketAddr, container_id: Option<String>, ts: u64) {
        let records = self.by_port.entry(addr.port()).or_default();
        match records
            .iter_mut()
            .rev()
            .find(|l| l.addr == addr && l.down_at.is_none())
        {
            Some(l) => {
                l.down_at = Some(ts);
                self.open -= 1;
            }
            None => records.push(Listener {
                addr,
                container_id,
                up_at: None,
                down_at: Some(ts),
            }),
        }
        self.closed.insert((ts, addr));
        self.forget_old(addr);
    }

    /// Whether a listener on exactly `addr` was seen come up and not go away since.
    pub fn is_up(&self, addr: SocketAddr) -> bool {
        self.on_port(addr.port())
            .iter()
            .any(|l| l.addr == addr && l.up_at.is_some() && l.down_at.is_none())
    }

    /// Marks every listener open before `ts` that takes `target` as gone at `ts`: a
    /// UDP datagram refused there proves no socket holds it any more.
    pub fn gone_before(&mut self, target: SocketAddr, ts: u64) {
        let gone: Vec<(SocketAddr, Option<String>)> = self
            .on_port(target.port())
            .iter()
            .filter(|l| l.down_at.is_none() && l.up_at.is_some_and(|up| up <= ts))
            .filter(|l| super::listeners::covers(l.addr, target))
            .map(|l| (l.addr, l.container_id.clone()))
            .collect();
        for (addr, container_id) in gone {
            self.down(addr, container_id, ts);
        }
    }

    /// Records of listeners on `port`, oldest first.
    pub fn on_port(&self, port: u16) -> &[Listener] {
        self.by_port.get(&port).map_or(&[], Vec::as_slice)
    }

    pub fn len(&self) -> usize {
        self.by_port.values().map(Vec::len).sum()
    }

    /// Only the last closed listener of an address matters (for refusals after it
    /// went away); older ones are dropped, and the oldest closed ones beyond the cap.
    fn forget_old(&mut self, addr: SocketAddr) {
        if let Some(records) = self.by_port.get_mut(&addr.port()) {
            let last_closed = records
                .iter()
                .filter(|l| l.addr == addr)
                .filter_map(|l| l.down_at)
                .max();
            let closed = &mut self.closed;
            records.retain(|l| {
                let keep = l.addr != addr || l.down_at.is_none() || l.down_at == last_closed;
                if !keep && let Some(down) = l.down_at {
                    closed.remove(&(down, l.addr));
                }
                keep
            });
        }
        while self.closed.len() > CLOSED_LISTENERS_PER_POD {
            let Some((down, addr)) = self.closed.pop_first() else {
                break;
            };
            if let Some(records) = self.by_port.get_mut(&addr.port()) {
                if let Some(i) = records
                    .iter()
                    .position(|l| l.addr == addr && l.down_at == Some(down))
                {
                    records.remove(i);
                }
                if records.is_empty() {
                    self.by_port.remove(&addr.port());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(port: u32) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], (port % 60_000) as u16 + 1_000))
    }

    #[test]
    fn open_listeners_beyond_the_cap_are_not_tracked() {
        let mut t = ListenerTable::default();
        let taken = (0..2_000u32).filter(|n| t.up(a(*n), None, 1)).count();
        assert_eq!(taken, OPEN_LISTENERS_PER_POD);
        assert_eq!(t.on_port(a(5).port()).len(), 1);
        assert!(t.on_port(a(1_500).port()).is_empty());
        // One goes away: room for one more.
        t.down(a(0), None, 2);
        assert!(t.up(a(1_999), None, 3));
    }

    #[test]
    fn closed_records_stay_bounded_and_the_last_close_per_address_is_kept() {
        let mut t = ListenerTable::default();
        for n in 0..1_000u32 {
            t.up(a(n), None, n as u64 * 10);
            t.down(a(n), None, n as u64 * 10 + 1);
        }
        for n in 0..10u64 {
            t.up(a(7), None, 20_000 + n * 10);
            t.down(a(7), None, 20_000 + n * 10 + 5);
        }
        assert!(t.len() <= CLOSED_LISTENERS_PER_POD, "{}", t.len());
        assert_eq!(t.on_port(a(7).port()).len(), 1);
        assert_eq!(t.on_port(a(7).port())[0].down_at, Some(20_095));
        assert_eq!(t.on_port(a(999).port()).len(), 1, "the newest closes stay");
    }
}
