//! Building commands from Go modules, cached per user outside the checkout
//! (`cache_root()`): the `go` command, a wrapper module of ours that requires a pinned
//! version (and maps the modules its go.mod replaces with local paths to their published
//! versions, since `go install` refuses such a module), `go build` into its `bin/` timed
//! into `build.log`, and `GoCommand` for a command of one module at one version. The
//! per-tool builds (`build.rs`, the sidecars, the collector, CRI-O) all go through here.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{Context, bail};

use super::versions::{ETCD_VERSION, KUBERNETES_VERSION, OPERATOR_VERSION, PROMETHEUS_VERSION};
use crate::run::{checked, output};

/// `$XDG_CACHE_HOME/sidecar-race/go` or `~/.cache/sidecar-race/go`.
pub fn cache_root() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/root/.cache"))
        .join("sidecar-race/go")
}

/// The `go` command, or a clear error.
pub(crate) fn go() -> anyhow::Result<PathBuf> {
    for candidate in ["go", "/usr/local/go/bin/go", "/usr/lib/go/bin/go"] {
        if let Some(v) = output(Command::new(candidate).arg("version")) {
            eprintln!("xtask: using {v}");
            return Ok(PathBuf::from(candidate));
        }
    }
    bail!(
        "Go is not installed: the cluster tier builds Kubernetes {KUBERNETES_VERSION}, etcd \
         {ETCD_VERSION}, the Prometheus Operator {OPERATOR_VERSION} and Prometheus \
         {PROMETHEUS_VERSION} from their Go modules (go 1.24 or newer, with access to the Go module \
         proxy). Install Go (https://go.dev/dl/) and run `cargo xtask setup` again"
    )
}

pub(crate) fn go_cmd(go: &Path, dir: &Path) -> Command {
    let mut c = Command::new(go);
    c.current_dir(dir).env("CGO_ENABLED", "0");
    c
}

/// The wrapper module: `go.mod` (unless one is already there, e.g. from an interrupted
/// build) and `tools.go` importing `packages`, then `go mod tidy`.
pub(crate) fn wrapper(
    go: &Path,
    dir: &Path,
    module: &str,
    go_mod_body: &str,
    packages: &[String],
) -> anyhow::Result<()> {
    fs::create_dir_all(dir.join("bin"))?;
    if !dir.join("go.mod").exists() {
        fs::write(
            dir.join("go.mod"),
            format!("module {module}\n\ngo 1.24.0\n\n{go_mod_body}"),
        )?;
    }
    if !dir.join("tools.go").exists() {
        let imports: String = packages.iter().map(|p| format!("\t_ \"{p}\"\n")).collect();
        fs::write(
            dir.join("tools.go"),
            format!(
                "//go:build tools\n\n// Pins the commands cargo xtask builds.\npackage tools\n\nimport (\n{imports})\n"
            ),
        )?;
    }
    if !dir.join("go.sum").exists() {
        checked(go_cmd(go, dir).args(["mod", "tidy"]))
            .context("`go mod tidy` failed (is the Go module proxy reachable?)")?;
    }
    Ok(())
}

/// A command built from one Go module at one version (a wrapper module requiring it)
/// into `cache_root()/<name>-<version>/bin/<name>`: krew, the cluster tier's real
/// sidecars.
pub struct GoCommand {
    pub name: &'static str,
    pub module: &'static str,
    /// Its `main` package (the module's root, or a path under it).
    pub package: &'static str,
    pub version: &'static str,
    /// The variable `-X` stamps the version into, where its `--version` reads it
    /// (none: the module embeds it).
    pub version_var: Option<&'static str>,
}

impl GoCommand {
    fn dir(&self) -> PathBuf {
        cache_root().join(format!("{}-{}", self.name, self.version))
    }

    /// The cached binary.
    pub fn binary(&self) -> PathBuf {
        self.dir().join("bin").join(self.name)
    }

    /// Builds it when it is not cached yet (a cold build takes minutes).
    pub fn ensure(&self) -> anyhow::Result<()> {
        if self.binary().exists() {
            return Ok(());
        }
        let go = go()?;
        let body = format!("require {} {}\n", self.module, self.version);
        wrapper(
            &go,
            &self.dir(),
            &format!("sidecar-race.local/{}", self.name),
            &body,
            &[self.package.to_string()],
        )?;
        eprintln!(
            "xtask: building {} {} (a cold build takes minutes)",
            self.name, self.version
        );
        let mut ldflags = "-s -w".to_string();
        if let Some(var) = self.version_var {
            ldflags.push_str(&format!(" -X {var}={}", self.version));
        }
        build_one(&go, &self.dir(), self.name, self.package, &ldflags)
    }
}

/// `go build` of `package` to `bin/<name>`, timed into build.log; skipped when present.
pub(crate) fn build_one(
    go: &Path,
    dir: &Path,
    name: &str,
    package: &str,
    ldflags: &str,
) -> anyhow::Result<()> {
    build_tagged(go, dir, name, package, ldflags, "", false)
}

/// `build_one` with Go build `tags` (comma-separated), and with cgo when `cgo` (CRI-O's
/// seccomp support links libseccomp).
pub(crate) fn build_tagged(
    go: &Path,
    dir: &Path,
    name: &str,
    package: &str,
    ldflags: &str,
    tags: &str,
    cgo: bool,
) -> anyhow::Result<()> {
    let out = dir.join("bin").join(name);
    if out.exists() {
        return Ok(());
    }
    let tmp = dir.join("bin").join(format!(".{name}.partial"));
    let started = Instant::now();
    checked(
        go_cmd(go, dir)
            .env("CGO_ENABLED", if cgo { "1" } else { "0" })
            .args([
                "build",
                "-trimpath",
                "-tags",
                tags,
                "-ldflags",
                ldflags,
                "-o",
            ])
            .arg(&tmp)
            .arg(package),
    )?;
    fs::rename(&tmp, &out)?;
    let line = format!("{name} {}s\n", started.elapsed().as_secs());
    let mut log = fs::read_to_string(dir.join("build.log")).unwrap_or_default();
    log.push_str(&line);
    fs::write(dir.join("build.log"), log)?;
    Ok(())
}

/// The modules a go.mod replaces with paths inside its own tree (`./staging/...` for
/// `k8s.io/kubernetes`, `./pkg/...` for the operator): what blocks `go install`.
pub(super) fn local_replacements(go_mod: &str) -> Vec<String> {
    go_mod
        .lines()
        .filter_map(|l| {
            let (from, to) = l.trim().trim_start_matches("replace ").split_once("=>")?;
            to.trim().starts_with("./").then(|| from.trim().to_string())
        })
        .collect()
}

/// The `replace` lines of a go.mod that map a module to another published version
/// (`cloud.google.com/go => cloud.google.com/go v0.123.0` in Prometheus'): a wrapper
/// module copies them, since only the main module's replacements apply.
pub(super) fn published_replacements(go_mod: &str) -> String {
    go_mod
        .lines()
        .map(|l| l.trim().trim_start_matches("replace "))
        .filter(|r| {
            r.split_once("=>")
                .is_some_and(|(_, to)| !to.trim().starts_with("./"))
        })
        .map(|r| format!("replace {r}\n"))
        .collect()
}

/// The `replace` block mapping each of `modules` to its published `version`.
pub(super) fn replace_block(modules: &[String], version: &str) -> String {
    let lines: String = modules
        .iter()
        .map(|m| format!("\t{m} => {m} {version}\n"))
        .collect();
    format!("replace (\n{lines})\n")
}

/// Where `go mod download` put a module (its go.mod and source tree).
pub(crate) fn download(go: &Path, dir: &Path, module: &str) -> anyhow::Result<serde_json::Value> {
    let out = Command::new(go)
        .current_dir(dir)
        .args(["mod", "download", "-json", module])
        .output()
        .with_context(|| format!("cannot run go mod download {module}"))?;
    if !out.status.success() {
        bail!(
            "go mod download {module} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// A module's source tree in Go's module cache, downloaded when missing.
pub(super) fn module_source(module: &str) -> anyhow::Result<PathBuf> {
    let go = go()?;
    let dir = cache_root();
    fs::create_dir_all(&dir)?;
    let info = download(&go, &dir, module)?;
    Ok(PathBuf::from(
        info["Dir"]
            .as_str()
            .context("no Dir from go mod download")?,
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn local_replacements_are_what_blocks_go_install() {
        let go_mod = "module k8s.io/kubernetes\n\nreplace (\n\
            \tk8s.io/api => ./staging/src/k8s.io/api\n\
            \tk8s.io/client-go => ./staging/src/k8s.io/client-go\n\
            \tgithub.com/x/y => github.com/x/y v1.0.0\n)\n\
            replace k8s.io/kms => ./staging/src/k8s.io/kms\n\
            replace example.com/op/pkg/client => ./pkg/client\n";
        assert_eq!(
            super::local_replacements(go_mod),
            [
                "k8s.io/api",
                "k8s.io/client-go",
                "k8s.io/kms",
                "example.com/op/pkg/client"
            ]
        );
        assert_eq!(
            super::replace_block(&["k8s.io/api".to_string()], "v0.34.4"),
            "replace (\n\tk8s.io/api => k8s.io/api v0.34.4\n)\n"
        );
        assert_eq!(
            super::published_replacements(go_mod),
            "replace github.com/x/y => github.com/x/y v1.0.0\n"
        );
    }
}
