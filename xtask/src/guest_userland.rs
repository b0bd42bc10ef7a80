//! The arm64 guest's programs for the kernel tier: Debian's arm64 busybox-static, `nft`
//! and util-linux's `setpriv`, with the libraries they load, fetched as `.deb`s through
//! a private apt (`apt-get download`, `dpkg-deb -x`: nothing is installed and dpkg's
//! architectures are untouched) and laid out as the guest sees them in
//! `target/kernels/arm64/userland/` (tests/src/vm_arch.rs puts that tree into the
//! initramfs as it is). What was fetched is listed in `userland.packages` beside it.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, bail};

use crate::{
    private_apt::{codename, download_deb, private_apt_for},
    run::{checked, output},
};

const ARCH: &str = "arm64";
/// The programs' packages and those of every library they load (the ELF `NEEDED`
/// entries, checked below: a library none of these has fails the set-up, naming it).
const PACKAGES: [&str; 15] = [
    "busybox-static",
    "nftables",
    "libnftables1",
    "libmnl0",
    "libnftnl11",
    "libxtables12",
    "libjansson4",
    "libgmp10",
    "libedit2",
    "libbsd0",
    "libmd0",
    "libtinfo6",
    "util-linux",
    "libcap-ng0",
    "libc6",
];
/// (path in the guest, path in the packages): the guest's `/init` runs them there.
const PROGRAMS: [(&str, &str); 3] = [
    ("bin/busybox", "bin/busybox"),
    ("bin/nft", "usr/sbin/nft"),
    ("opt/setpriv", "usr/bin/setpriv"),
];
/// Where Debian's loader looks for arm64 libraries (the guest has no `ld.so.cache`).
const LIB_DIRS: [&str; 2] = ["lib/aarch64-linux-gnu", "usr/lib/aarch64-linux-gnu"];

/// Lays out `<kernels>/arm64/userland` unless it is there already (apt's private
/// state shared with the arm64 kernel's, under `kernels`).
pub fn ensure(kernels: &Path) -> anyhow::Result<()> {
    let arch_dir = kernels.join(ARCH);
    let userland = arch_dir.join("userland");
    if userland.join(PROGRAMS[0].0).is_file() {
        return Ok(());
    }
    eprintln!("xtask: fetching the arm64 guest's busybox, nft and setpriv");
    let scratch = arch_dir.join("userland.download");
    let _ = fs::remove_dir_all(&scratch);
    let options = private_apt_for(kernels, &codename()?, Some(ARCH))?;
    let unpacked = scratch.join("root");
    let mut fetched = String::new();
    for package in PACKAGES {
        let deb = download_deb(&options, &format!("{package}:{ARCH}"), &scratch.join("deb"))?;
        checked(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacked))?;
        fetched.push_str(&format!(
            "{}\n",
            deb.file_name().expect("a .deb").to_string_lossy()
        ));
    }
    let staged = arch_dir.join("userland.tmp");
    let _ = fs::remove_dir_all(&staged);
    lay_out(&unpacked, &staged)?;
    let _ = fs::remove_dir_all(&userland);
    fs::rename(&staged, &userland)?;
    fs::write(arch_dir.join("userland.packages"), fetched)?;
    fs::remove_dir_all(&scratch)?;
    Ok(())
}

/// Copies `PROGRAMS`, their loader and every library they need (transitively) from the
/// unpacked packages `root` into `to`, each library under its soname.
fn lay_out(root: &Path, to: &Path) -> anyhow::Result<()> {
    let mut pending: Vec<PathBuf> = Vec::new();
    let mut copied: Vec<String> = Vec::new();
    let mut copy = |guest: &str, from: &Path, pending: &mut Vec<PathBuf>| -> anyhow::Result<()> {
        if copied.iter().any(|c| c == guest) {
            return Ok(());
        }
        let file = resolve(root, from)?;
        let dest = to.join(guest);
        fs::create_dir_all(dest.parent().expect("a parent"))?;
        fs::copy(&file, &dest).with_context(|| format!("copying {}", file.display()))?;
        copied.push(guest.to_string());
        pending.push(dest);
        Ok(())
    };
    for (guest, from) in PROGRAMS {
        copy(guest, Path::new(from), &mut pending)?;
    }
    while let Some(elf) = pending.pop() {
        let (interpreter, needed) = dynamic_needs(&elf)?;
        if let Some(interpreter) = interpreter {
            let rel = interpreter.trim_start_matches('/');
            copy(rel, Path::new(rel), &mut pending)?;
        }
        for soname in needed {
            let Some(dir) = LIB_DIRS
                .iter()
                .find(|d| fs::symlink_metadata(root.join(d).join(&soname)).is_ok())
            else {
                bail!(
                    "{} needs {soname}, which none of the fetched arm64 packages has: add its \
                     package to xtask/src/guest_userland.rs",
                    elf.display()
                );
            };
            let rel = format!("{dir}/{soname}");
            copy(&rel, Path::new(&rel), &mut pending)?;
        }
    }
    Ok(())
}

/// `rel` under `root`, following symbolic links inside `root` (absolute ones included).
fn resolve(root: &Path, rel: &Path) -> anyhow::Result<PathBuf> {
    let mut at = root.join(rel);
    for _ in 0..40 {
        let meta =
            fs::symlink_metadata(&at).with_context(|| format!("{} is missing", at.display()))?;
        if !meta.file_type().is_symlink() {
            return Ok(at);
        }
        let target = fs::read_link(&at)?;
        at = match target.strip_prefix("/") {
            Ok(inside) => root.join(inside),
            Err(_) => at.parent().expect("a parent").join(target),
        };
    }
    bail!("{} is a symbolic link loop", rel.display())
}

/// The program interpreter and `NEEDED` libraries of an ELF file (binutils' readelf,
/// which reads any architecture's).
fn dynamic_needs(elf: &Path) -> anyhow::Result<(Option<String>, Vec<String>)> {
    let text = output(Command::new("readelf").args(["-W", "-l", "-d"]).arg(elf))
        .with_context(|| format!("readelf -l -d {} failed (Debian: binutils)", elf.display()))?;
    let bracketed = |line: &str, key: &str| {
        let rest = &line[line.find(key)? + key.len()..];
        Some(rest[..rest.find(']')?].to_string())
    };
    let interpreter = text
        .lines()
        .find_map(|l| bracketed(l, "[Requesting program interpreter: "));
    let needed = text
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| bracketed(l, "Shared library: ["))
        .collect();
    Ok((interpreter, needed))
}
