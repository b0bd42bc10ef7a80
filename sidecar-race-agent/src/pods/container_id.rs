//! Which runtime made a container, and its id: the scheme of a pod status's
//! `containerID` (`containerd://<id>`, `cri-o://<id>`), and the runtime a cgroup path
//! names. The pod model and attribution by cgroup path both read it.

/// Container runtime that made a container cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum Runtime {
    Containerd,
    #[strum(serialize = "cri-o")]
    CriO,
    Docker,
    Podman,
}

impl serde::Serialize for Runtime {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Runtime {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Runtime::ALL
            .into_iter()
            .find(|r| r.as_str() == name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown container runtime `{name}`")))
    }
}

impl Runtime {
    const ALL: [Runtime; 4] = [
        Runtime::Containerd,
        Runtime::CriO,
        Runtime::Docker,
        Runtime::Podman,
    ];

    /// Name for output: "containerd" | "cri-o" | "docker" | "podman".
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The scheme Kubernetes uses in containerStatuses[].containerID, e.g. "containerd" in
    /// "containerd://<id>", "cri-o" in "cri-o://<id>", "docker" in "docker://<id>".
    pub fn status_scheme(self) -> &'static str {
        // Kubernetes writes the runtime's own name. Podman never runs pods; "podman" just keeps
        // the mapping total and invertible.
        self.as_str()
    }

    /// Inverse of status_scheme.
    pub fn from_status_scheme(scheme: &str) -> Option<Runtime> {
        Runtime::ALL
            .into_iter()
            .find(|r| r.status_scheme() == scheme)
    }
}

/// Splits "containerd://<id>" into (Runtime::Containerd, "<id>"); None when malformed.
pub fn parse_status_container_id(s: &str) -> Option<(Runtime, String)> {
    let (scheme, id) = s.split_once("://")?;
    let runtime = Runtime::from_status_scheme(scheme)?;
    is_container_id(id).then(|| (runtime, id.to_owned()))
}

/// A runtime's container id: 64 lowercase hex digits.
pub(crate) fn is_container_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use Runtime::{Containerd, CriO, Docker};

    const ID: &str = "0ac0814cd3dc1e341620f880205074403be81d5ed005e3286e5c205fe37f388f";
    const ID2: &str = "7071c532c6d1d2aa56081e5b5f5d475d27c27bc349d03049614ea06c167527c8";

    #[test]
    fn status_container_ids() {
        assert_eq!(
            parse_status_container_id(&format!("containerd://{ID}")),
            Some((Containerd, ID.to_owned()))
        );
        assert_eq!(
            parse_status_container_id(&format!("cri-o://{ID}")),
            Some((CriO, ID.to_owned()))
        );
        assert_eq!(
            parse_status_container_id(&format!("docker://{ID2}")),
            Some((Docker, ID2.to_owned()))
        );
        for bad in [
            String::new(),
            "containerd://".into(),
            "containerd:/".into(),
            ID.into(),
            format!("containerd:{ID}"),
            format!("crio://{ID}"),
            format!("CONTAINERD://{ID}"),
            format!("rkt://{ID}"),
            format!("containerd://{}", &ID[..63]),
            format!("containerd://{ID}0"),
            format!("containerd://{}", ID.to_uppercase()),
            format!("containerd://{ID}/"),
            format!("://{ID}"),
        ] {
            assert_eq!(parse_status_container_id(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn runtime_names_round_trip() {
        let names: Vec<_> = Runtime::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names, ["containerd", "cri-o", "docker", "podman"]);
        for r in Runtime::ALL {
            assert_eq!(Runtime::from_status_scheme(r.status_scheme()), Some(r));
        }
        assert_eq!(Runtime::from_status_scheme("crio"), None);
        assert_eq!(Runtime::from_status_scheme(""), None);
        assert_eq!(Runtime::from_status_scheme("containerd://"), None);
    }
}
