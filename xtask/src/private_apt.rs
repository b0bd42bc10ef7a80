//! Debian packages fetched without installing them: a private apt state (sources list,
//! lists, cache) per suite and architecture, `apt-get download` into a directory, and
//! the machine's own release. The kernel tier's kernels, the arm64 guest's programs and
//! the arm64 cross build's standard library come this way; dpkg's architectures and the
//! machine's apt state are untouched.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, bail};

use crate::run::checked;

const DEBIAN_KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// The machine's Debian release (`VERSION_CODENAME`): where its rustc-web came from,
/// so the suite the cross build's standard library and the arm64 guest's programs come
/// from.
pub fn codename() -> anyhow::Result<String> {
    let os = fs::read_to_string("/etc/os-release").context("cannot read /etc/os-release")?;
    os.lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim_matches('"').to_string())
        .filter(|v| !v.is_empty())
        .context("no VERSION_CODENAME in /etc/os-release (not Debian?)")
}

/// apt options that read Debian `suite` (and its security updates) from a private
/// sources list and state directory under `root`, after updating them; with `arch`,
/// the packages of `arch` instead of the machine's own (for `apt-get download`; dpkg's
/// architectures are not touched).
pub fn private_apt_for(
    root: &Path,
    suite: &str,
    arch: Option<&str>,
) -> anyhow::Result<Vec<String>> {
    if !Path::new(DEBIAN_KEYRING).is_file() {
        bail!("{DEBIAN_KEYRING} is missing (Debian: debian-archive-keyring); it verifies {suite}");
    }
    let dir = root.join(match arch {
        None => format!("apt-{suite}"),
        Some(arch) => format!("apt-{suite}-{arch}"),
    });
    for d in ["lists/partial", "cache/archives/partial"] {
        fs::create_dir_all(dir.join(d))?;
    }
    let _ = checked(Command::new("chmod").args(["-R", "777"]).arg(&dir));
    let sources = dir.join("sources.list");
    fs::write(
        &sources,
        format!(
            "deb [signed-by={DEBIAN_KEYRING}] http://deb.debian.org/debian {suite} main\n\
             deb [signed-by={DEBIAN_KEYRING}] http://deb.debian.org/debian-security {suite}-security main\n"
        ),
    )?;
    let options: Vec<String> = [
        format!("Dir::Etc::SourceList={}", sources.display()),
        "Dir::Etc::SourceParts=/dev/null".to_string(),
        format!("Dir::State::Lists={}", dir.join("lists").display()),
        format!("Dir::Cache={}", dir.join("cache").display()),
        "Dir::State::Status=/dev/null".to_string(),
        "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false".to_string(),
    ]
    .into_iter()
    .chain(arch.into_iter().flat_map(|a| {
        [
            format!("APT::Architecture={a}"),
            format!("APT::Architectures={a}"),
        ]
    }))
    .flat_map(|o| ["-o".to_string(), o])
    .collect();
    checked(
        Command::new("apt-get")
            .args(&options)
            .args(["update", "-q"]),
    )
    .with_context(|| format!("apt-get update of Debian {suite}"))?;
    Ok(options)
}

/// `apt-get download` of `spec` (`package[:arch]=version`) into the emptied directory
/// `into`; the `.deb`.
pub fn download_deb(options: &[String], spec: &str, into: &Path) -> anyhow::Result<PathBuf> {
    let _ = fs::remove_dir_all(into);
    fs::create_dir_all(into)?;
    // apt drops privileges to `_apt` for downloads; let it write here.
    let _ = checked(Command::new("chmod").arg("777").arg(into));
    checked(
        Command::new("apt-get")
            .args(options)
            .args(["download", "-q", spec])
            .current_dir(into),
    )
    .with_context(|| format!("apt-get download {spec}"))?;
    fs::read_dir(into)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .context("apt-get download left no .deb")
}
