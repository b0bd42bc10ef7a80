//! A pod's Unix listeners by socket: when each came up and went away, and in which
//! container. Bounded like the port listeners: open ones beyond a cap are not
//! tracked, and of a socket only its newest record is kept (a Unix socket name has
//! one listener at a time).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::{listener_table::OPEN_LISTENERS_PER_POD, pairs, service::SocketKey};

/// The newest listener of one socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnixListener {
    pub container_id: Option<String>,
    pub up_at: Option<u64>,
    pub down_at: Option<u64>,
    /// A datagram socket's bind (it never listens). Kept after it goes: a refusal on
    /// its path is then a datagram's, whatever the refused call said of its socket.
    #[serde(default)]
    pub datagram: bool,
}

impl UnixListener {
    pub fn is_up_at(&self, ts: u64) -> bool {
        self.up_at.is_some_and(|up| up <= ts) && self.down_at.is_none_or(|down| down > ts)
    }
}

#[derive(Default, Clone, Serialize, Deserialize)]
pub struct UnixListeners {
    #[serde(with = "pairs")]
    by_socket: HashMap<SocketKey, UnixListener>,
}

impl UnixListeners {
    /// A listener came up. False when the pod already has the maximum of records and
    /// this socket is new: it is not tracked.
    pub fn up(
        &mut self,
        key: SocketKey,
        container_id: Option<String>,
        ts: u64,
        datagram: bool,
    ) -> bool {
        if !self.by_socket.contains_key(&key) && self.by_socket.len() >= OPEN_LISTENERS_PER_POD {
            self.forget_closed();
            if self.by_socket.len() >= OPEN_LISTENERS_PER_POD {
                return false;
            }
        }
        self.by_socket.insert(
            key,
            UnixListener {
                container_id,
                up_at: Some(ts),
                down_at: None,
                datagram,
            },
        );
        true
    }

    /// The socket's listener went away at `ts` (seen closing, or known gone because a
    /// connect to it was refused).
    pub fn down(&mut self, key: &SocketKey, container_id: Option<String>, ts: u64) {
        let room = self.by_socket.len() < OPEN_LISTENERS_PER_POD;
        match self.by_socket.get_mut(key) {
            Some(l) if l.down_at.is_none() => l.down_at = Some(ts.max(l.up_at.unwrap_or(0))),
            Some(_) => {}
            None if room => {
                self.by_socket.insert(
                    key.clone(),
                    UnixListener {
                        container_id,
                        up_at: None,
                        down_at: Some(ts),
                        datagram: false,
                    },
                );
            }
            None => {}
        }
    }

    /// The records kept under a path as bound (decided before the binding
    /// container's mounts were known).
    pub fn on_paths(&self) -> Vec<(String, UnixListener)> {
        self.by_socket
            .iter()
            .filter_map(|(k, l)| match k {
                SocketKey::Path(p) => Some((p.clone(), l.clone())),
                _ => None,
            })
            .collect()
    }

    /// The record of path `path` is the record of socket `to` from now on; when `to`
    /// has a record already, the newer of the two is kept.
    pub fn rekey(&mut self, path: &str, to: SocketKey) {
        let Some(moved) = self.by_socket.remove(&SocketKey::Path(path.to_string())) else {
            return;
        };
        let newest = |l: &UnixListener| l.up_at.max(l.down_at);
        match self.by_socket.get(&to) {
            Some(kept) if newest(kept) >= newest(&moved) => {}
            _ => {
                self.by_socket.insert(to, moved);
            }
        }
    }

    pub fn get(&self, key: &SocketKey) -> Option<&UnixListener> {
        self.by_socket.get(key)
    }

    pub fn len(&self) -> usize {
        self.by_socket.len()
    }

    fn forget_closed(&mut self) {
        self.by_socket.retain(|_, l| l.down_at.is_none());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: usize) -> SocketKey {
        SocketKey::Path(format!("/run/{n}.sock"))
    }

    #[test]
    fn a_socket_keeps_its_newest_listener_and_the_table_stays_bounded() {
        let mut t = UnixListeners::default();
        assert!(t.up(key(1), Some("a".into()), 10, false));
        t.down(&key(1), None, 20);
        t.down(&key(1), None, 30);
        assert_eq!(
            t.get(&key(1)).unwrap().down_at,
            Some(20),
            "the first close counts"
        );
        assert!(t.up(key(1), Some("b".into()), 40, false));
        assert!(t.get(&key(1)).unwrap().is_up_at(41));
        let taken = (2..3_000)
            .filter(|n| t.up(key(*n), None, 50, false))
            .count();
        assert_eq!(t.len(), OPEN_LISTENERS_PER_POD);
        assert_eq!(taken, OPEN_LISTENERS_PER_POD - 1);
        // Closed records make room.
        t.down(&key(2), None, 60);
        assert!(t.up(key(5_000), None, 70, false));
        assert!(t.get(&key(2)).is_none());
    }
}
