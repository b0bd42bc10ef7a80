//! `sidecar-race-agent unpin`: removes what agents pinned on this node, so their
//! programs detach (after an uninstall; a reboot does the same).

use std::time::Duration;

use crate::{cli::PlaceArgs, kernel::pins::Pins, node_lock::NodeLock};

/// How long `unpin` waits for a running agent to release the node.
const WAIT: Duration = Duration::from_secs(10);

pub fn run(args: &PlaceArgs) -> anyhow::Result<()> {
    let _lock = NodeLock::acquire(&args.state_dir, WAIT)?;
    let pins = Pins::new(&args.bpffs, &args.state_dir).map_err(anyhow::Error::msg)?;
    let removed = pins.remove_others(None);
    // The checkpoint belongs to the pins: without them it describes a ring that is gone.
    let _ = std::fs::remove_file(args.state_dir.join("checkpoint.json"));
    if removed.is_empty() {
        println!(
            "nothing pinned under {}",
            args.bpffs.join("sidecar-race").display()
        );
    } else {
        println!("unpinned {}", removed.join(", "));
    }
    Ok(())
}
