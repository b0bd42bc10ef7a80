//! A client container's instances: a new instance of a crash-looping container
//! continues the startup incident of its torn-down predecessor, matched by name only.

use super::state::Detector;
use crate::detect::service::Service;
use crate::{
    detect::{
        fact::Client,
        incident::{Episode, Incident, State},
    },
    pods::pod_meta::PodMeta,
};

impl Detector {
    /// The open startup incident on `port` of an earlier, torn-down instance of
    /// `client`'s container (a crash loop), which the new instance's refusals join.
    /// Instances are the same container when their names agree; an unknown name is
    /// never guessed.
    pub(super) fn crash_loop_incident(
        &self,
        uid: &str,
        client: &Client,
        service: &Service,
        meta: &dyn PodMeta,
    ) -> Instance {
        let Client::Container(new_id) = client else {
            return Instance::None;
        };
        let mut candidates = self.earlier_instances(uid, service, new_id);
        candidates.retain(|(_, inc)| inc.state == State::Open);
        if candidates.is_empty() {
            return Instance::None;
        }
        let Some(new_name) = meta.container_name(new_id) else {
            return Instance::Unnamed;
        };
        candidates
            .into_iter()
            .find(|(old_id, _)| meta.container_name(old_id) == Some(new_name))
            .map_or(Instance::None, |(_, inc)| Instance::Of(inc.id))
    }

    /// Startup incidents on `port` (open, or resolved by a listener) of client
    /// containers torn down, other than `new_id`, with their client's id.
    pub(super) fn earlier_instances(
        &self,
        uid: &str,
        service: &Service,
        new_id: &str,
    ) -> Vec<(&str, &Incident)> {
        let Some(ps) = self.pods.get(uid) else {
            return Vec::new();
        };
        self.incidents
            .open_or_resolved_in(uid)
            .filter_map(|((client, p), inc)| {
                let Client::Container(old_id) = client else {
                    return None;
                };
                let earlier = p == service
                    && **old_id != *new_id
                    && inc.is_shown()
                    && inc.episode == Episode::BeforeListener
                    && ps.removed_at(old_id).is_some();
                earlier.then_some((&**old_id, inc))
            })
            .collect()
    }
}

/// Whose instance a new client container is.
pub(super) enum Instance {
    /// Of the container whose crash-loop incident this is.
    Of(u64),
    /// Earlier instances have incidents on the port, but this one's name is unknown.
    Unnamed,
    None,
}
