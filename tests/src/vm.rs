//! The kernel tier: boots the kernels fleets run (Debian's 6.1 and 6.12 cloud kernels,
//! fetched by `cargo xtask setup` into `target/kernels/<label>/`) under QEMU's plain
//! emulation (TCG, no KVM, no root), with an initramfs holding busybox-static, the agent,
//! `sr-app`, `sr-proxy` and the shared libraries `ldd` lists for them. `/init`
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

use crate::pod::{require_binary, sibling_binary};

/// The guest's `/init`.
pub const INIT_SCRIPT: &str = include_str!("vm_init.sh");
pub const QEMU: &str = "qemu-system-x86_64";
/// busybox-static's binary (Debian).
pub const BUSYBOX: &str = "/bin/busybox";

/// One kernel fetched by `cargo xtask setup`.
#[derive(Debug, Clone)]
pub struct Kernel {
    /// `6.1`, `6.12`.
    pub label: String,
    pub vmlinuz: PathBuf,
    /// What apt resolved, e.g. `linux-image-6.1.0-57-cloud-amd64 6.1.192-3`.
    pub package: String,
}

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

/// The kernel `label` when it was fetched.
pub fn kernel(label: &str) -> Option<Kernel> {
    let dir = kernels_dir().join(label);
    let vmlinuz = dir.join("vmlinuz");
    (vmlinuz.is_file() && dir.join("modules/order").is_file()).then(|| Kernel {
        label: label.to_string(),
        package: fs::read_to_string(dir.join("package"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
        vmlinuz,
    })
}

/// What the tier needs that is missing (QEMU, busybox-static, the kernel), or `None`.
pub fn missing(label: &str) -> Option<String> {
    let mut missing = Vec::new();
    if !crate::root::have(QEMU) {
        missing.push(format!("{QEMU} (Debian: qemu-system-x86)"));
    }
    if !is_static(Path::new(BUSYBOX)) {
        missing.push(format!("a static {BUSYBOX} (Debian: busybox-static)"));
    }
    if !crate::root::have("nft") {
        missing.push("nft (Debian: nftables)".to_string());
    }
    if kernel(label).is_none() {
        missing.push(format!(
            "the {label} kernel (vmlinuz, modules/order) in {}",
            kernels_dir().join(label).display()
        ));
    }
    (!missing.is_empty()).then(|| missing.join(", "))
}

/// The kernel `label` and QEMU, or `None` after printing why the test is skipped.
/// In CI (`CI` set) a missing piece fails the test instead: setup must provide it.
pub fn kernel_or_skip(test: &str, label: &str) -> Option<Kernel> {
    if let Some(what) = missing(label) {
        // `cargo xtask setup` tried, and the registry no longer serves that kernel.
        let unavailable = kernels_dir().join(format!("{label}.unavailable"));
        if let Ok(why) = fs::read_to_string(&unavailable) {
            eprintln!(
                "SKIPPED {test}: the {label} kernel could not be fetched: {}",
                why.trim()
            );
            return None;
        }
        if std::env::var_os("CI").is_some() {
            panic!("{test}: missing {what}; `cargo xtask setup` fetches and installs them");
        }
        eprintln!("SKIPPED {test}: missing {what}; run `cargo xtask setup` to fetch them");
        return None;
    }
    kernel(label)
}

/// Whether an ELF file has no program interpreter (statically linked).
fn is_static(path: &Path) -> bool {
    let Ok(bytes) = fs::read(path) else {
        return false;
    };
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" || bytes[4] != 2 {
        return false;
    }
    let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap()) as usize;
    let (phoff, phentsize, phnum) = (u64_at(32), u16_at(54), u16_at(56));
    (0..phnum).all(|i| {
        let o = phoff + i * phentsize;
        // PT_INTERP = 3
        o + 4 > bytes.len() || u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap()) != 3
    })
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

/// `binary` without debug info (much smaller; the VM holds the initramfs in memory),
/// or as it is when `strip` is not there.
fn stripped(binary: &Path, scratch: &Path) -> anyhow::Result<Vec<u8>> {
    let out = scratch.join(binary.file_name().expect("a file name"));
    let ok = Command::new("strip")
        .arg("--strip-debug")
        .arg("-o")
        .arg(&out)
        .arg(binary)
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

/// Writes the initramfs for `kernel`: busybox as `/bin/busybox`, `/init`, the agent,
/// sr-app, sr-proxy, `nft` and util-linux's `setpriv` with their libraries, `/scenario.env`, and the kernel's
/// modules for the REDIRECT case in `/redirect/` (from `cargo xtask setup`).
pub fn build_initramfs(path: &Path, env: &ScenarioEnv, kernel: &Kernel) -> anyhow::Result<()> {
    let scratch = path.with_extension("scratch");
    fs::create_dir_all(&scratch)?;
    let mut cpio = Cpio::default();
    for d in ["/dev", "/proc", "/sys", "/tmp", "/run", "/sbin", "/usr/bin"] {
        cpio.dir(d);
    }
    cpio.char_device("/dev/console", 5, 1);
    cpio.char_device("/dev/null", 1, 3);
    cpio.file("/bin/busybox", 0o755, &fs::read(BUSYBOX)?);
    cpio.file("/init", 0o755, INIT_SCRIPT.as_bytes());
    let env_text: String = env.iter().map(|(k, v)| format!("{k}='{v}'\n")).collect();
    cpio.file("/scenario.env", 0o644, env_text.as_bytes());
    let agent = crate::agent::agent_binary();
    let binaries = [
        ("/bin/sidecar-race-agent", agent),
        ("/bin/sr-app", require_binary(&sibling_binary("sr-app"))),
        ("/bin/sr-proxy", require_binary(&sibling_binary("sr-proxy"))),
        ("/bin/sr-uds", require_binary(&sibling_binary("sr-uds"))),
    ];
    let mut libs = BTreeSet::new();
    for (to, from) in &binaries {
        cpio.file(to, 0o755, &stripped(from, &scratch)?);
        libs.extend(shared_libraries(from)?);
    }
    // util-linux's setpriv (busybox's cannot cut the bounding set), for the
    // least-privilege case.
    let setpriv = which("setpriv").context("setpriv (util-linux) is needed")?;
    cpio.file("/opt/setpriv", 0o755, &fs::read(&setpriv)?);
    libs.extend(shared_libraries(&setpriv)?);
    let modules = kernel.vmlinuz.with_file_name("modules");
    let nft = which("nft");
    if let (Ok(order), Some(nft)) = (fs::read_to_string(modules.join("order")), nft) {
        cpio.file("/bin/nft", 0o755, &fs::read(&nft)?);
        libs.extend(shared_libraries(&nft)?);
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
    }
    for lib in libs {
        let data = fs::read(&lib).with_context(|| format!("reading {}", lib.display()))?;
        cpio.file(&lib.to_string_lossy(), 0o755, &data);
    }
    let _ = fs::remove_dir_all(&scratch);
    fs::File::create(path)?.write_all(&cpio.finish())?;
    Ok(())
}

fn which(bin: &str) -> Option<PathBuf> {
    let out = Command::new("sh")
        .args(["-c", &format!("command -v {bin}")])
        .output()
        .ok()?;
    let p = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && p.starts_with('/')).then(|| PathBuf::from(p))
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
    let start = Instant::now();
    let mut child = Command::new(QEMU)
        .args(["-accel", "tcg", "-cpu", "max", "-smp", "1", "-m", "768"])
        .args(["-nodefaults", "-display", "none", "-no-reboot"])
        .args(["-serial", "stdio", "-monitor", "none"])
        .arg("-kernel")
        .arg(&kernel.vmlinuz)
        .arg("-initrd")
        .arg(initramfs)
        .args([
            "-append",
            "console=ttyS0 quiet loglevel=1 panic=-1 rdinit=/init",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {QEMU}"))?;
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
            "{QEMU} exited with {s}: {stderr}\nconsole:\n{}",
            console.join("\n")
        );
    }
    Ok(GuestRun {
        elapsed: start.elapsed(),
        timed_out,
        console,
    })
}
