//! Noisy neighbours: `sr-flood` processes in a pod's containers (or their sub-cgroups)
//! that all start at one wall-clock instant and each count their refusals; the total
//! is what the agent must account for, delivered or suppressed.

use std::{
    path::PathBuf,
    process::Command,
    time::{SystemTime, UNIX_EPOCH},
};

use crate::pod::{SimContainer, SimPod, require_binary, sibling_binary};

/// Flooders started together, with the files their counts go to.
pub struct Flood {
    runs: Vec<(u32, PathBuf)>,
}

impl Flood {
    /// One `sr-flood` in each of `targets`, all starting at `start_at` and refusing for
    /// `seconds`, with `args` (e.g. `--ports 16000-16099 --hot 9999`).
    pub fn start(
        pod: &mut SimPod,
        targets: &[&SimContainer],
        seconds: u64,
        args: &[&str],
        start_at: SystemTime,
    ) -> Flood {
        let start_ms = start_at.duration_since(UNIX_EPOCH).unwrap().as_millis();
        let runs = targets
            .iter()
            .enumerate()
            .map(|(i, target)| {
                let out = std::env::temp_dir().join(format!(
                    "sr-flood-{}-{}-{i}",
                    std::process::id(),
                    start_ms
                ));
                let mut cmd = Command::new(require_binary(&sibling_binary("sr-flood")));
                cmd.args(["--seconds", &seconds.to_string()])
                    .args(args)
                    .args(["--start-at-unix-ms", &start_ms.to_string()])
                    .arg("--out")
                    .arg(&out);
                (pod.spawn(target, cmd).expect("start sr-flood"), out)
            })
            .collect();
        Flood { runs }
    }

    /// Waits for every flooder; the refusals they counted, in total.
    pub fn total(self, pod: &mut SimPod) -> u64 {
        self.runs
            .into_iter()
            .map(|(pid, out)| {
                assert!(pod.wait(pid).expect("wait sr-flood").success());
                let n = std::fs::read_to_string(&out).expect("sr-flood's count");
                let _ = std::fs::remove_file(&out);
                n.trim().parse::<u64>().expect("a count")
            })
            .sum()
    }
}
