//! The kernel tier: boots the kernels fleets run (Debian's cloud kernels, fetched by
//! `cargo xtask setup` into `target/kernels/<label>/`, arm64 ones into
//! `target/kernels/arm64/<label>/`) under QEMU's plain emulation (TCG, no KVM, no root),
//! with an initramfs holding busybox-static, the agent, `sr-app`, `sr-proxy`, `nft`,
//! `setpriv` and their libraries, for the kernel's architecture (`vm_arch.rs`). `/init`
//! (`vm_init.sh`) runs the scenario and prints `@@SR <key> <value>` lines on the serial
//! console, which the host test parses and asserts on.

use std::{
    collections::BTreeSet,
    fs,
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use serde_json::Value;

pub use crate::vm_arch::Arch;

/// The guest's `/init`.
pub const INIT_SCRIPT: &str = include_str!("vm_init.sh");

/// One kernel fetched by `cargo xtask setup`.
#[derive(Debug, Clone)]
pub struct Kernel {
    pub arch: Arch,
    /// `6.1`, `6.12`.
    pub label: String,
    pub vmlinuz: PathBuf,
    /// What apt resolved, e.g. `linux-image-6.1.0-57-cloud-amd64 6.1.192-3`.
    pub package: String,
}

/// The `arch` kernel `label` when it was fetched.
pub fn kernel(arch: Arch, label: &str) -> Option<Kernel> {
    let dir = arch.kernels_dir().join(label);
    let vmlinuz = dir.join("vmlinuz");
    (vmlinuz.is_file() && dir.join("modules/order").is_file()).then(|| Kernel {
        arch,
        label: label.to_string(),
        package: fs::read_to_string(dir.join("package"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
        vmlinuz,
    })
}

/// What the tier needs that is missing (QEMU, the guest's programs, the kernel), or
/// `None`.
pub fn missing(arch: Arch, label: &str) -> Option<String> {
    let mut missing = arch.missing();
    if kernel(arch, label).is_none() {
        missing.push(format!(
            "the {} {label} kernel (vmlinuz, modules/order) in {}",
            arch.name(),
            arch.kernels_dir().join(label).display()
        ));
    }
    (!missing.is_empty()).then(|| missing.join(", "))
}

/// The kernel `label` and QEMU, or `None` after printing why the test is skipped.
/// In CI (`CI` set) a missing piece fails the test instead: setup must provide it.
pub fn kernel_or_skip(test: &str, arch: Arch, label: &str) -> Option<Kernel> {
    if let Some(what) = missing(arch, label) {
        // `cargo xtask setup` tried, and the registry no longer serves that kernel.
        let unavailable = arch.kernels_dir().join(format!("{label}.unavailable"));
        if let Ok(why) = fs::read_to_string(&unavailable) {
            sidecar_race_kit::root::skip(
                test,
                &format!("the {label} kernel could not be fetched: {}", why.trim()),
            );
            return None;
        }
        if std::env::var_os("CI").is_some() {
            panic!("{test}: missing {what}; `cargo xtask setup` fetches and installs them");
        }
        sidecar_race_kit::root::skip(
            test,
            &format!("missing {what}; run `cargo xtask setup` to fetch them"),
        );
        return None;
    }
    kernel(arch, label)
}

/// A `newc` cpio archive, as the kernel unpacks an initramfs.
#[derive(Default)]
pub struct Cpio {
    out: Vec<u8>,
    ino: u32,
    dirs: BTreeSet<String>,
}

impl Cpio {
    fn entry(&mut self, name: &str, mode: u32, rdev: (u32, u32), data: &[u8]) {
        self.ino += 1;
        let name = name.trim_start_matches('/');
        let header = format!(
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            self.ino,
            mode,
            0,
            0,
            1,
            0,
            data.len(),
            0,
            0,
            rdev.0,
            rdev.1,
            name.len() + 1,
            0
        );
        self.out.extend_from_slice(header.as_bytes());
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
    }

    /// A directory and its parents (each once).
    pub fn dir(&mut self, path: &str) {
        let mut at = String::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            at.push('/');
            at.push_str(part);
            if self.dirs.insert(at.clone()) {
                self.entry(&at.clone(), 0o040755, (0, 0), &[]);
            }
        }
    }

    fn parent(&mut self, path: &str) {
        if let Some((parent, _)) = path.rsplit_once('/')
            && !parent.is_empty()
        {
            self.dir(parent);
        }
    }

    pub fn file(&mut self, path: &str, mode: u32, data: &[u8]) {
        self.parent(path);
        self.entry(path, 0o100000 | mode, (0, 0), data);
    }

    pub fn char_device(&mut self, path: &str, major: u32, minor: u32) {
        self.parent(path);
        self.entry(path, 0o020600, (major, minor), &[]);
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, (0, 0), &[]);
        self.out
    }
}

/// `binary` without debug info (much smaller; the VM holds the initramfs in memory),
/// or as it is when `strip` (the binutils of `arch`) is not there.
fn stripped(binary: &Path, arch: Arch, scratch: &Path) -> anyhow::Result<Vec<u8>> {
    let out = scratch.join(binary.file_name().expect("a file name"));
    let ok = Command::new(arch.strip())
        .arg("--strip-debug")
        .arg("-o")
        .arg(&out)
        .arg(binary)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let bytes = fs::read(if ok { &out } else { binary })?;
    let _ = fs::remove_file(&out);
    Ok(bytes)
}

/// Values the guest's `/scenario.env` defines (shell `KEY=value`).
pub type ScenarioEnv = Vec<(String, String)>;

/// The NAT rule of the REDIRECT case: what a mesh's outbound capture does, narrowed to
/// one service.
pub const REDIRECT_RULES: &str = "table ip sr_nat {
  chain output {
    type nat hook output priority -100; policy accept;
    ip daddr 10.96.0.10 tcp dport 80 redirect to :15001
  }
}
";

/// Writes the initramfs for `kernel`: `/init`, `/scenario.env`, the programs of its
/// architecture (`Arch::programs`: busybox, the agent, the stand-ins, `nft`, `setpriv`
/// and their libraries), and the kernel's modules for the REDIRECT case in `/redirect/`
/// (from `cargo xtask setup`).
pub fn build_initramfs(path: &Path, env: &ScenarioEnv, kernel: &Kernel) -> anyhow::Result<()> {
    let scratch = path.with_extension("scratch");
    fs::create_dir_all(&scratch)?;
    let mut cpio = Cpio::default();
    for d in ["/dev", "/proc", "/sys", "/tmp", "/run", "/sbin", "/usr/bin"] {
        cpio.dir(d);
    }
    cpio.char_device("/dev/console", 5, 1);
    cpio.char_device("/dev/null", 1, 3);
    cpio.file("/init", 0o755, INIT_SCRIPT.as_bytes());
    let env_text: String = env.iter().map(|(k, v)| format!("{k}='{v}'\n")).collect();
    cpio.file("/scenario.env", 0o644, env_text.as_bytes());
    for (to, from) in kernel.arch.programs()? {
        let data = stripped(&from, kernel.arch, &scratch)
            .with_context(|| format!("reading {}", from.display()))?;
        cpio.file(&to, 0o755, &data);
    }
    let modules = kernel.vmlinuz.with_file_name("modules");
    let order = fs::read_to_string(modules.join("order"))
        .with_context(|| format!("reading {}", modules.join("order").display()))?;
    cpio.file("/redirect/rules.nft", 0o644, REDIRECT_RULES.as_bytes());
    cpio.file("/redirect/order", 0o644, order.as_bytes());
    for m in order.split_whitespace() {
        let ko = modules.join(format!("{m}.ko"));
        cpio.file(
            &format!("/redirect/{m}.ko"),
            0o644,
            &fs::read(&ko).with_context(|| format!("reading {}", ko.display()))?,
        );
    }
    let _ = fs::remove_dir_all(&scratch);
    fs::File::create(path)?.write_all(&cpio.finish())?;
    Ok(())
}

/// What one VM run printed.
#[derive(Debug)]
pub struct GuestRun {
    pub elapsed: Duration,
    pub timed_out: bool,
    /// Every console line (without `\r`).
    pub console: Vec<String>,
}

impl GuestRun {
    /// The values of every `@@SR key value` line, in order.
    pub fn values(&self, key: &str) -> Vec<String> {
        let prefix = format!("@@SR {key} ");
        let bare = format!("@@SR {key}");
        self.console
            .iter()
            .filter_map(|l| {
                let at = l.find("@@SR ")?;
                let l = &l[at..];
                if l == bare {
                    Some(String::new())
                } else {
                    l.strip_prefix(&prefix).map(str::to_string)
                }
            })
            .collect()
    }

    /// The one value of `key`; panics with the console when absent.
    pub fn one(&self, key: &str) -> String {
        let v = self.values(key);
        assert!(
            v.len() == 1,
            "expected one `{key}` line from the guest, got {v:?}; console:\n{}",
            self.console_text()
        );
        v.into_iter().next().unwrap()
    }

    /// The `key` lines that are JSON objects.
    pub fn json(&self, key: &str) -> Vec<Value> {
        self.values(key)
            .iter()
            .filter_map(|v| serde_json::from_str(v).ok())
            .collect()
    }

    pub fn console_text(&self) -> String {
        self.console.join("\n")
    }
}

/// Boots `kernel` with `initramfs` under TCG (one CPU, 768 MiB), the serial console on
/// stdout; kills QEMU after `timeout`.
pub fn boot(kernel: &Kernel, initramfs: &Path, timeout: Duration) -> anyhow::Result<GuestRun> {
    boot_with(kernel, initramfs, timeout, "")
}

/// [`boot`] with `extra` on the kernel's command line (e.g. `lockdown=confidentiality`).
pub fn boot_with(
    kernel: &Kernel,
    initramfs: &Path,
    timeout: Duration,
    extra: &str,
) -> anyhow::Result<GuestRun> {
    let start = Instant::now();
    let qemu = kernel.arch.qemu();
    let mut child = Command::new(qemu)
        .args(["-accel", "tcg"])
        .args(kernel.arch.machine())
        .args(["-smp", "1", "-m", "768"])
        .args(["-nodefaults", "-display", "none", "-no-reboot"])
        .args(["-serial", "stdio", "-monitor", "none"])
        .arg("-kernel")
        .arg(&kernel.vmlinuz)
        .arg("-initrd")
        .arg(initramfs)
        .arg("-append")
        .arg(format!(
            "console={} quiet loglevel=1 panic=-1 rdinit=/init {extra}",
            kernel.arch.console()
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {qemu}"))?;
    let lines = Arc::new(Mutex::new(Vec::new()));
    let out = child.stdout.take().unwrap();
    let l = lines.clone();
    let reader = std::thread::spawn(move || {
        let mut r = BufReader::new(out);
        let mut buf = Vec::new();
        while r.read_until(b'\n', &mut buf).is_ok_and(|n| n > 0) {
            let s = String::from_utf8_lossy(&buf);
            l.lock()
                .unwrap()
                .push(s.trim_end_matches(['\r', '\n']).to_string());
            buf.clear();
        }
    });
    let mut timed_out = false;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break Some(s);
        }
        if start.elapsed() > timeout {
            timed_out = true;
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = reader.join();
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
    }
    let console = lines.lock().unwrap().clone();
    if let Some(s) = status
        && !s.success()
    {
        bail!(
            "{qemu} exited with {s}: {stderr}\nconsole:\n{}",
            console.join("\n")
        );
    }
    Ok(GuestRun {
        elapsed: start.elapsed(),
        timed_out,
        console,
    })
}
