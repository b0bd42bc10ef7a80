//! Where the agent keeps what outlives it: pinned kernel state on bpffs and the
//! state directory (the node lock, the pins' manifests, the checkpoint).

use std::path::PathBuf;

use clap::{Args, ValueEnum};

#[derive(Debug, Clone, Args)]
pub struct StateArgs {
    /// `auto`: pin the programs, maps and ring buffers under --bpffs and keep a
    /// checkpoint in --state-dir, so a restarted agent loses nothing (unpinned, with a
    /// warning, where the kernel or node cannot); `off`: today's agent, whose kernel
    /// state goes with it (pins an earlier agent left are removed).
    #[arg(long, env = "SIDECAR_RACE_PIN", value_enum, default_value_t = PinMode::Auto)]
    pub pin: PinMode,
    #[command(flatten)]
    pub place: PlaceArgs,
}

/// `--pin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PinMode {
    Auto,
    Off,
}

/// Where the pins and the state directory are (`run`, and `unpin`, which removes them).
#[derive(Debug, Clone, Args)]
pub struct PlaceArgs {
    /// A mounted BPF filesystem; pins go under `<bpffs>/sidecar-race/`.
    #[arg(long, env = "SIDECAR_RACE_BPFFS", default_value = "/sys/fs/bpf")]
    pub bpffs: PathBuf,
    /// The agent's directory on the node: its lock, the pins' manifests and the
    /// checkpoint (mode 0700).
    #[arg(
        long,
        env = "SIDECAR_RACE_STATE_DIR",
        default_value = "/var/lib/sidecar-race"
    )]
    pub state_dir: PathBuf,
}

impl StateArgs {
    /// The checkpoint's file, when the agent keeps one.
    pub fn checkpoint(&self) -> Option<PathBuf> {
        (self.pin == PinMode::Auto).then(|| self.place.state_dir.join("checkpoint.json"))
    }
}
