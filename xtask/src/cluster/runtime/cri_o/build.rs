//! CRI-O for `cluster up --runtime cri-o`, built once per machine by the test tier's
//! set-up into `~/.cache/sidecar-race/go/cri-o-<version>-<patch>/bin/` (`crio`, cgo with
//! libseccomp, and its C helper `pinns`), and `crictl` from cri-tools beside it. The
//! module proxy serves one CRI-O 1.34 tag, v1.34.0 (a development snapshot of May
//! 2025): the only CRI-O whose minor matches the kubelet's.
//!
//! One patch is applied to the downloaded source (`patch_hugetlb`); the cache
//! directory's name carries its revision, so a changed patch builds anew.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, bail};

use crate::{
    cluster::go_module::{GoCommand, build_tagged, cache_root, download, go},
    host::Apt,
    run::checked,
};

const MODULE: &str = "github.com/cri-o/cri-o";
const VERSION: &str = "v1.34.0";
/// The revision of our patch.
const PATCH: &str = "hugetlb1";
/// Its Makefile's tags, without the C libraries this host lacks (btrfs, gpgme,
/// ostree); `seccomp` needs libseccomp.
const TAGS: &str =
    "containers_image_openpgp,containers_image_ostree_stub,exclude_graphdriver_btrfs,seccomp";

/// crictl, the CRI client `down` removes CRI-O's pods with (cri-tools' minor follows
/// Kubernetes').
pub const CRICTL: GoCommand = GoCommand {
    name: "crictl",
    module: "sigs.k8s.io/cri-tools",
    package: "sigs.k8s.io/cri-tools/cmd/crictl",
    version: "v1.34.0",
    version_var: Some("sigs.k8s.io/cri-tools/pkg/version.Version"),
};

fn dir() -> PathBuf {
    cache_root().join(format!("cri-o-{VERSION}-{PATCH}"))
}

pub fn crio_bin() -> PathBuf {
    dir().join("bin/crio")
}

pub fn pinns_bin() -> PathBuf {
    dir().join("bin/pinns")
}

/// What `cluster up --runtime cri-o` needs built and is not.
pub fn missing() -> Vec<PathBuf> {
    [crio_bin(), pinns_bin(), CRICTL.binary()]
        .into_iter()
        .filter(|p| !p.exists())
        .collect()
}

/// Debian's packages CRI-O builds or runs with: libseccomp's headers (and pkg-config to
/// find them) and a C compiler for cgo and pinns; conmon, which watches each container,
/// runc, and skopeo, which puts the images into CRI-O's storage. Debian's crun 1.8 is
/// not one: it refuses CRI-O 1.34's OCI spec 1.2.1.
pub fn want_tools(apt: &mut Apt) {
    // libseccomp-dev, pkg-config, gcc: what runc's build needs too.
    crate::cluster::runtime::containerd2::build::want_tools(apt);
    apt.want_tools(&[
        ("make", "make"),
        ("conmon", "conmon"),
        ("runc", "runc"),
        ("skopeo", "skopeo"),
    ]);
}

/// Builds what is missing (cold: about 4 minutes, most of it `crio`).
pub fn ensure() -> anyhow::Result<()> {
    CRICTL.ensure()?;
    if crio_bin().exists() && pinns_bin().exists() {
        return Ok(());
    }
    let go = go()?;
    let d = dir();
    fs::create_dir_all(d.join("bin"))?;
    let src = patched_source(&go, &d)?;
    if !pinns_bin().exists() {
        checked(Command::new("make").arg("-C").arg(src.join("pinns")))
            .context("cannot build CRI-O's pinns (gcc, make)")?;
        fs::copy(src.join("bin/pinns"), pinns_bin())?;
    }
    // The wrapper module: CRI-O replaced by the patched copy, whose go.mod and go.sum
    // pin every dependency.
    fs::write(
        d.join("go.mod"),
        format!(
            "module sidecar-race.local/cri-o\n\ngo 1.24.1\n\nrequire {MODULE} {VERSION}\n\nreplace {MODULE} => ./src\n"
        ),
    )?;
    fs::copy(src.join("go.sum"), d.join("go.sum"))?;
    eprintln!("xtask: building CRI-O {VERSION} (a cold build takes minutes)");
    build_tagged(
        &go,
        &d,
        "crio",
        &format!("{MODULE}/cmd/crio"),
        "-s -w",
        TAGS,
        true,
    )
    .context("cannot build CRI-O (it needs libseccomp-dev and a C compiler)")
}

/// The module's source, copied out of Go's read-only module cache and patched.
fn patched_source(go: &Path, d: &Path) -> anyhow::Result<PathBuf> {
    let src = d.join("src");
    if src.join("go.mod").exists() {
        return Ok(src);
    }
    let info = download(go, d, &format!("{MODULE}@{VERSION}"))?;
    let from = info["Dir"]
        .as_str()
        .context("no Dir from go mod download")?;
    let tmp = d.join(".src.partial");
    let _ = fs::remove_dir_all(&tmp);
    checked(Command::new("cp").arg("-r").arg(from).arg(&tmp))?;
    checked(Command::new("chmod").args(["-R", "u+w"]).arg(&tmp))?;
    let file = tmp.join(HUGETLB_FILE);
    let source = fs::read_to_string(&file)?;
    fs::write(&file, patch_hugetlb(&source)?)?;
    fs::rename(&tmp, &src)?;
    Ok(src)
}

const HUGETLB_FILE: &str = "internal/config/node/cgroups_linux.go";

/// The loop that takes a controller for usable when /proc/cgroups lists it.
const LISTED_LOOP: &str = "\t\tfor _, toCheck := range relevantControllers {
\t\t\tfor _, ctrl := range ctrls {
\t\t\t\tif ctrl == toCheck.name {
\t\t\t\t\t*toCheck.enabled = true

\t\t\t\t\tbreak
\t\t\t\t}
\t\t\t}
\t\t}
";

/// On a hybrid host (cgroup v1 controllers, cgroup2 at /sys/fs/cgroup/unified, as
/// this one), /proc/cgroups lists hugetlb when it is bound to cgroup2 only: CRI-O then
/// passes the kubelet's hugepage limits, which runc's v1 manager cannot set, and
/// every container fails ("cannot set hugetlb limit"). After the patch a controller
/// counts on a v1 host only with a v1 hierarchy of its own (containerd tolerates the
/// same with `tolerate_missing_hugetlb_controller`; CRI-O has no such option).
fn patch_hugetlb(source: &str) -> anyhow::Result<String> {
    if source.matches(LISTED_LOOP).count() != 1 {
        bail!("CRI-O's {HUGETLB_FILE} no longer has the loop the hugetlb patch follows");
    }
    let check = "\t\t// sidecar-race: a v1 controller counts only with a v1 hierarchy of its own.
\t\tif v2, _ := cgroups.IsCgroup2UnifiedMode(); !v2 {
\t\t\tfor _, toCheck := range relevantControllers {
\t\t\t\tif _, err := os.Stat(filepath.Join(\"/sys/fs/cgroup\", toCheck.name)); err != nil {
\t\t\t\t\t*toCheck.enabled = false
\t\t\t\t}
\t\t\t}
\t\t}
";
    Ok(source.replace(LISTED_LOOP, &format!("{LISTED_LOOP}{check}")))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_patch_follows_the_loop_once_and_refuses_a_changed_source() {
        let source = format!("func f() {{\n{}}}\n", super::LISTED_LOOP);
        let patched = super::patch_hugetlb(&source).unwrap();
        assert!(patched.contains("IsCgroup2UnifiedMode"), "{patched}");
        assert_eq!(patched.matches(super::LISTED_LOOP).count(), 1);
        assert!(super::patch_hugetlb("func f() {}\n").is_err());
    }
}
