//! What differs between the kernel tier's guest architectures: the QEMU that boots
//! them, its machine and console, where their kernels are, and where the programs the
//! guest runs come from.
//! - amd64 guests run the host's own programs (the tier runs on x86_64): the agent and
//!   stand-ins of this build, busybox-static, `nft`, `setpriv` and the libraries `ldd`
//!   lists for them.
//! - arm64 guests run the static agent and stand-ins cross-built by
//!   `cargo xtask test arm64` (`target/aarch64-unknown-linux-gnu/debug/`), and Debian's
//!   arm64 busybox-static, `nft` and `setpriv` with their libraries, laid out as the
//!   guest sees them by `cargo xtask setup` in `target/kernels/arm64/userland/`.

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Context;

use sidecar_race_kit::{
    agent::agent_binary,
    pod::{require_binary, sibling_binary},
    root::have,
};

use crate::cri::is_static_elf;

pub use sidecar_race_testbed::images::BUSYBOX;
/// The stand-ins the scenario runs, beside the agent.
const STAND_INS: [&str; 3] = ["sr-app", "sr-proxy", "sr-uds"];
const ARM64_TRIPLE: &str = "aarch64-unknown-linux-gnu";
/// Where `cargo xtask test arm64` leaves the arm64 agent and stand-ins (default
/// `<workspace>/target/aarch64-unknown-linux-gnu/debug`).
pub const ARM64_BIN_DIR_ENV: &str = "SIDECAR_RACE_ARM64_BIN_DIR";

/// Where `cargo xtask setup` puts the kernels: `$SIDECAR_RACE_KERNELS` or
/// `<workspace>/target/kernels`.
pub fn kernels_dir() -> PathBuf {
    std::env::var_os("SIDECAR_RACE_KERNELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .expect("workspace root")
                .join("target/kernels")
        })
}

/// The shared libraries and loader `ldd` lists for `binary` (absolute paths).
pub fn shared_libraries(binary: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .context("running ldd")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if text.contains("not a dynamic executable") || !out.status.success() {
        return Ok(Vec::new());
    }
    Ok(text
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, rest)) => rest.split_whitespace().next()?,
                None => l.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Amd64,
    Arm64,
}

impl Arch {
    /// Debian's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }

    pub fn qemu(self) -> &'static str {
        match self {
            Arch::Amd64 => "qemu-system-x86_64",
            Arch::Arm64 => "qemu-system-aarch64",
        }
    }

    fn qemu_package(self) -> &'static str {
        match self {
            Arch::Amd64 => "qemu-system-x86",
            Arch::Arm64 => "qemu-system-arm",
        }
    }

    /// QEMU's machine and CPU. On arm64, `max` with QEMU's own pointer-authentication
    /// algorithm: Debian's kernel signs every return address, and emulating the
    /// architected QARMA cipher makes a boot several times slower.
    pub fn machine(self) -> &'static [&'static str] {
        match self {
            Arch::Amd64 => &["-cpu", "max"],
            Arch::Arm64 => &["-M", "virt", "-cpu", "max,pauth-impdef=on"],
        }
    }

    /// binutils' `strip` for this architecture's ELF files (the host's reads only its
    /// own; the cross one comes with gcc-aarch64-linux-gnu).
    pub fn strip(self) -> &'static str {
        match self {
            Arch::Amd64 => "strip",
            Arch::Arm64 => "aarch64-linux-gnu-strip",
        }
    }

    /// The serial console's device in the guest.
    pub fn console(self) -> &'static str {
        match self {
            Arch::Amd64 => "ttyS0",
            Arch::Arm64 => "ttyAMA0",
        }
    }

    /// Where `cargo xtask setup` puts this architecture's kernels (`<label>/`).
    pub fn kernels_dir(self) -> PathBuf {
        match self {
            Arch::Amd64 => kernels_dir(),
            Arch::Arm64 => kernels_dir().join("arm64"),
        }
    }

    /// Debian's arm64 programs, in the guest's layout.
    fn userland(self) -> PathBuf {
        self.kernels_dir().join("userland")
    }

    fn arm64_bin_dir() -> PathBuf {
        std::env::var_os(ARM64_BIN_DIR_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                kernels_dir()
                    .parent()
                    .expect("target/")
                    .join(ARM64_TRIPLE)
                    .join("debug")
            })
    }

    /// What this architecture's guest programs need that is missing.
    pub fn missing(self) -> Vec<String> {
        let mut missing = Vec::new();
        if !have(self.qemu()) {
            missing.push(format!("{} (Debian: {})", self.qemu(), self.qemu_package()));
        }
        match self {
            Arch::Amd64 => {
                if !is_static_elf(Path::new(BUSYBOX)) {
                    missing.push(format!("a static {BUSYBOX} (Debian: busybox-static)"));
                }
                for (bin, package) in [("nft", "nftables"), ("setpriv", "util-linux")] {
                    if !have(bin) {
                        missing.push(format!("{bin} (Debian: {package})"));
                    }
                }
            }
            Arch::Arm64 => {
                if !self.userland().join("bin/busybox").is_file() {
                    missing.push(format!(
                        "Debian's arm64 busybox, nft and setpriv in {} (`cargo xtask setup`)",
                        self.userland().display()
                    ));
                }
                let dir = Self::arm64_bin_dir();
                if let Some(absent) = std::iter::once("sidecar-race-agent")
                    .chain(STAND_INS)
                    .find(|b| !dir.join(b).is_file())
                {
                    missing.push(format!(
                        "the arm64 {absent} in {} (`cargo xtask test arm64` cross-builds it)",
                        dir.display()
                    ));
                }
            }
        }
        missing
    }

    /// Every program of the guest and the libraries they load: (guest path, host file).
    /// Binaries are the agent, the stand-ins, busybox (`/bin/busybox`), `/bin/nft` and
    /// `/opt/setpriv` (util-linux's: busybox's cannot cut the bounding set).
    pub fn programs(self) -> anyhow::Result<Vec<(String, PathBuf)>> {
        match self {
            Arch::Amd64 => host_programs(),
            Arch::Arm64 => arm64_programs(&self.userland(), &Self::arm64_bin_dir()),
        }
    }
}

fn host_programs() -> anyhow::Result<Vec<(String, PathBuf)>> {
    let mut programs = vec![
        ("/bin/sidecar-race-agent".to_string(), agent_binary()),
        ("/bin/busybox".to_string(), PathBuf::from(BUSYBOX)),
        (
            "/opt/setpriv".to_string(),
            which("setpriv").context("setpriv (util-linux) is needed")?,
        ),
        (
            "/bin/nft".to_string(),
            which("nft").context("nft (nftables) is needed")?,
        ),
    ];
    for s in STAND_INS {
        programs.push((format!("/bin/{s}"), require_binary(&sibling_binary(s))));
    }
    let mut libs = BTreeSet::new();
    for (_, from) in &programs {
        libs.extend(shared_libraries(from)?);
    }
    programs.extend(
        libs.into_iter()
            .map(|l| (l.to_string_lossy().into_owned(), l)),
    );
    Ok(programs)
}

/// The userland tree as it is (each file at its own path in the guest), and the
/// static cross-built agent and stand-ins in `/bin`.
fn arm64_programs(userland: &Path, bin_dir: &Path) -> anyhow::Result<Vec<(String, PathBuf)>> {
    let mut programs = Vec::new();
    let mut stack = vec![userland.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let guest = path.strip_prefix(userland).expect("under userland");
                programs.push((format!("/{}", guest.display()), path));
            }
        }
    }
    for name in std::iter::once("sidecar-race-agent").chain(STAND_INS) {
        let bin = require_binary(&bin_dir.join(name));
        anyhow::ensure!(
            is_static_elf(&bin),
            "{} is not statically linked: the arm64 guest has no Rust binaries' libraries",
            bin.display()
        );
        programs.push((format!("/bin/{name}"), bin));
    }
    Ok(programs)
}

fn which(bin: &str) -> Option<PathBuf> {
    let out = Command::new("sh")
        .args(["-c", &format!("command -v {bin}")])
        .output()
        .ok()?;
    let p = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && p.starts_with('/')).then(|| PathBuf::from(p))
}
