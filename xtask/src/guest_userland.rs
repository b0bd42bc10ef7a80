//! The arm64 guest's programs for the kernel tier: Debian's arm64 busybox-static, `nft`
//! and util-linux's `setpriv`, with the libraries they load, fetched as `.deb`s through
//! a private apt (`apt-get download`, `dpkg-deb -x`: nothing is installed and dpkg's
//! architectures are untouched) and laid out as the guest sees them in
//! `target/kernels/arm64/userland/` (tests/src/vm_arch.rs puts that tree into the
//! initramfs as it is). What was fetched is listed in `userland.packages` beside it.

use std::{fs, path::Path, process::Command};

use anyhow::Context;
use sidecar_race_testbed::program_tree::{self, Source};

use crate::{
    private_apt::{codename, download_deb, private_apt_for},
    run::checked,
};

const ARCH: &str = "arm64";
/// The programs' packages and those of every library they load (the ELF `NEEDED`
/// entries, checked by `lay_out`: a library none of these has fails the set-up, naming
/// it).
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
/// unpacked packages `root` into `to`, each library under its soname
/// (`sidecar_race_testbed::program_tree`, as the glibc test image is made).
fn lay_out(root: &Path, to: &Path) -> anyhow::Result<()> {
    let source = Source {
        root,
        lib_dirs: &LIB_DIRS,
    };
    let tree = source.collect(&PROGRAMS, &[]).context(
        "the arm64 guest's programs (the package of a library none of the fetched ones \
         has goes into PACKAGES in xtask/src/guest_userland.rs)",
    )?;
    program_tree::lay_out(&tree, to)?;
    Ok(())
}
