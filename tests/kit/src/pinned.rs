//! A private BPF filesystem and state directory for agents that pin (`--pin=auto`):
//! a bpffs mount is an instance of its own, so a test's pins never meet the host's
//! or another test's. Dropped: unpinned (the programs detach) and unmounted.

use std::path::PathBuf;

use crate::agent::RunAgent;

pub struct PinnedPlace {
    pub bpffs: PathBuf,
    pub state_dir: PathBuf,
    root: PathBuf,
}

impl PinnedPlace {
    pub fn new(name: &str) -> Self {
        let root = std::env::temp_dir().join(format!("sr-pins-{name}-{}", std::process::id()));
        let bpffs = root.join("bpf");
        let state_dir = root.join("state");
        std::fs::create_dir_all(&bpffs).expect("a directory for bpffs");
        let target = std::ffi::CString::new(bpffs.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mount(2) with NUL-terminated strings.
        let r = unsafe {
            libc::mount(
                c"bpf".as_ptr(),
                target.as_ptr(),
                c"bpf".as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        assert_eq!(r, 0, "mount bpffs: {}", std::io::Error::last_os_error());
        Self {
            bpffs,
            state_dir,
            root,
        }
    }

    /// `run` arguments that pin here (they win over the kit's `SIDECAR_RACE_PIN=off`).
    pub fn args(&self) -> Vec<String> {
        vec![
            "--pin".into(),
            "auto".into(),
            "--bpffs".into(),
            self.bpffs.display().to_string(),
            "--state-dir".into(),
            self.state_dir.display().to_string(),
        ]
    }

    /// `run` pinning here, reading the pods file `source` (polled every 0.1 s), with
    /// `extra` arguments.
    pub fn agent(&self, source: &str, extra: &[&str]) -> RunAgent {
        let mut args = vec![
            "--pods-from".to_string(),
            source.to_string(),
            "--pods-poll-seconds".into(),
            "0.1".into(),
        ];
        args.extend(self.args());
        args.extend(extra.iter().map(|a| a.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        RunAgent::start(&args)
    }

    /// The layout keys pinned now.
    pub fn keys(&self) -> Vec<String> {
        std::fs::read_dir(self.bpffs.join("sidecar-race"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for PinnedPlace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.bpffs.join("sidecar-race"));
        let target = std::ffi::CString::new(self.bpffs.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: umount2(2) with a NUL-terminated path.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
