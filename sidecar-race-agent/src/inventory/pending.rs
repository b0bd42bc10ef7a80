//! Events of containers the pod source has not named yet wait here a little: the
//! kubelet reports a container's id some time after the container starts, and its
//! first connects are exactly the ones that race. Order is kept: what comes later
//! waits behind what waits.

use std::{
    collections::VecDeque,
    time::{Duration, Instant},
};

use super::{attribution::Attribution, node::Inventory};

pub struct Pending<T> {
    queue: VecDeque<(T, Attribution, Instant)>,
    wait: Duration,
}

impl<T> Pending<T> {
    pub fn new(wait: Duration) -> Self {
        Self {
            queue: VecDeque::new(),
            wait,
        }
    }

    /// Queues `item`, or hands it back at once when nothing is waiting and its names
    /// are complete (or cannot come).
    pub fn push(
        &mut self,
        item: T,
        attribution: Attribution,
        inv: &Inventory,
        now: Instant,
    ) -> Option<(T, Attribution)> {
        if self.queue.is_empty() && !inv.may_learn_names(&attribution) {
            return Some((item, attribution));
        }
        self.queue.push_back((item, attribution, now + self.wait));
        None
    }

    /// Items at the front that are named by now or have waited long enough.
    pub fn ready(&mut self, inv: &Inventory, now: Instant) -> Vec<(T, Attribution)> {
        let mut out = Vec::new();
        while let Some((_, a, deadline)) = self.queue.front_mut() {
            inv.refresh(a);
            if inv.may_learn_names(a) && now < *deadline {
                break;
            }
            let (item, a, _) = self.queue.pop_front().expect("front exists");
            out.push((item, a));
        }
        out
    }

    /// Everything, named or not (at exit).
    pub fn drain(&mut self, inv: &Inventory) -> Vec<(T, Attribution)> {
        self.queue
            .drain(..)
            .map(|(item, mut a, _)| {
                inv.refresh(&mut a);
                (item, a)
            })
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}
