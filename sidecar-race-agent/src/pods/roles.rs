//! How a container is declared and what it is for (`Role`), and how a sidecar is
//! declared as the metrics and docs name it (`Pattern`).

use serde::{Deserialize, Serialize};

/// How a container is declared, and what it is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Role {
    /// In `containers`: started together with the others.
    App,
    /// In `containers`, but recognised as a sidecar (see `pods::sidecars`).
    ClassicSidecar,
    /// In `initContainers`, runs to completion first.
    Init,
    /// In `initContainers` with `restartPolicy: Always`: a native sidecar.
    NativeSidecar,
    Ephemeral,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn is_sidecar(self) -> bool {
        matches!(self, Role::ClassicSidecar | Role::NativeSidecar)
    }

    /// Listed in `containers[]` (started together, stopped together).
    pub fn in_containers(self) -> bool {
        matches!(self, Role::App | Role::ClassicSidecar)
    }
}

/// How a sidecar is declared, as docs/reference.md and the metrics name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Pattern {
    /// In `containers`: races the app at start and at drain.
    Classic,
    /// Native sidecar without a startupProbe: ordered, but "started" is not "serving".
    Native,
    /// Native sidecar with a startupProbe.
    NativeProbed,
    Unknown,
}

impl Pattern {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}
