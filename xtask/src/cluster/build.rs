//! The cluster's binaries, built once per machine from their Go modules and cached
//! outside the checkout, keyed by version: `~/.cache/sidecar-race/go/k8s-<version>/bin/`
//! (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy,
//! kubectl), `~/.cache/sidecar-race/go/etcd-<version>/bin/etcd` and the Prometheus
//! Operator's `~/.cache/sidecar-race/go/prometheus-operator-<version>/bin/operator`. A
//! fresh clone on the same machine (CI's) reuses them; Go's own module and build caches
//! sit beside them.
//!
//! `k8s.io/kubernetes` replaces its staging modules with local paths, and the operator
//! its `pkg/apis/monitoring` and `pkg/client`, so `go install` of either is refused:
//! each cache directory holds a wrapper module of ours that requires the pinned version
//! and maps every such module to its published version (the list is read from the
//! downloaded go.mod). Binaries carry the version ldflags, so
//! `kubectl version` and `/version` report the pinned version. Each binary's build time
//! is appended to `build.log`.
//!
//! Helm, which the chart's tests drive (deploy/helm/), is built the same way into
//! `~/.cache/sidecar-race/go/helm-<version>/bin/helm`, and Prometheus, which the
//! cluster tier runs on the operator's generated configuration, into
//! `~/.cache/sidecar-race/go/prometheus-<version>/bin/prometheus`: with Kubernetes
//! service discovery only and without the embedded web UI (its build tags).

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{Context, bail};

use super::versions::{
    ETCD_VERSION, HELM_VERSION, KUBERNETES_VERSION, OPENSHIFT_API_VERSION, OPERATOR_VERSION,
    PROMETHEUS_VERSION,
};
use crate::run::{checked, output};

pub const KUBERNETES_BINARIES: [&str; 6] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
    "kubectl",
];

/// `$XDG_CACHE_HOME/sidecar-race/go` or `~/.cache/sidecar-race/go`.
pub fn cache_root() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/root/.cache"))
        .join("sidecar-race/go")
}

/// Kubernetes `version`'s cache directory (1.34's, or the 1.36 node's).
pub(crate) fn kubernetes_dir(version: &str) -> PathBuf {
    cache_root().join(format!("k8s-{version}"))
}

fn etcd_dir() -> PathBuf {
    cache_root().join(format!("etcd-{ETCD_VERSION}"))
}

fn operator_dir() -> PathBuf {
    cache_root().join(format!("prometheus-operator-{OPERATOR_VERSION}"))
}

/// A cached Kubernetes binary (`kubectl`, `kubelet`, ...).
pub fn kubernetes_bin(name: &str) -> PathBuf {
    kubernetes_dir(KUBERNETES_VERSION).join("bin").join(name)
}

pub fn etcd_bin() -> PathBuf {
    etcd_dir().join("bin/etcd")
}

fn helm_dir() -> PathBuf {
    cache_root().join(format!("helm-{HELM_VERSION}"))
}

/// The cached `helm` (tests find it through `SIDECAR_RACE_HELM` or this path).
pub fn helm_bin() -> PathBuf {
    helm_dir().join("bin/helm")
}

/// The Prometheus Operator (`cmd/operator`).
pub fn operator_bin() -> PathBuf {
    operator_dir().join("bin/operator")
}

fn prometheus_dir() -> PathBuf {
    cache_root().join(format!("prometheus-{PROMETHEUS_VERSION}"))
}

/// Prometheus (`cmd/prometheus`), Kubernetes service discovery only.
pub fn prometheus_bin() -> PathBuf {
    prometheus_dir().join("bin/prometheus")
}

/// Which binaries are not built yet.
pub fn missing() -> Vec<PathBuf> {
    KUBERNETES_BINARIES
        .iter()
        .map(|b| kubernetes_bin(b))
        .chain([etcd_bin(), helm_bin(), operator_bin(), prometheus_bin()])
        .filter(|p| !p.exists())
        .collect()
}

/// Builds whatever is missing; nothing to do (and no Go needed) when all are there.
pub fn ensure() -> anyhow::Result<()> {
    if missing().is_empty() {
        operator_source()?;
        return scc_crd().map(drop);
    }
    let go = go()?;
    let started = Instant::now();
    build_kubernetes(&go, KUBERNETES_VERSION)?;
    build_etcd(&go)?;
    build_helm(&go)?;
    build_operator(&go)?;
    build_prometheus(&go)?;
    eprintln!(
        "xtask: cluster binaries built in {} s (cached in {})",
        started.elapsed().as_secs(),
        cache_root().display()
    );
    operator_source()?;
    scc_crd().map(drop)
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

fn go_cmd(go: &Path, dir: &Path) -> Command {
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
fn local_replacements(go_mod: &str) -> Vec<String> {
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
fn published_replacements(go_mod: &str) -> String {
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
fn replace_block(modules: &[String], version: &str) -> String {
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

/// Kubernetes `v` (`v1.<minor>.<patch>`) into its cache directory.
pub(crate) fn build_kubernetes(go: &Path, v: &str) -> anyhow::Result<()> {
    let dir = kubernetes_dir(v);
    fs::create_dir_all(&dir)?;
    let minor_patch = v.trim_start_matches("v1.");
    let minor = minor_patch.split('.').next().unwrap_or_default();
    let info = download(go, &dir, &format!("k8s.io/kubernetes@{v}"))?;
    let upstream = fs::read_to_string(info["GoMod"].as_str().context("no GoMod")?)?;
    let staging = local_replacements(&upstream);
    if staging.is_empty() {
        bail!("no staging replacements in k8s.io/kubernetes@{v}'s go.mod");
    }
    let body = format!(
        "require k8s.io/kubernetes {v}\n\n{}",
        replace_block(&staging, &format!("v0.{minor_patch}"))
    );
    let packages: Vec<String> = super::build::KUBERNETES_BINARIES
        .iter()
        .map(|b| format!("k8s.io/kubernetes/cmd/{b}"))
        .collect();
    wrapper(go, &dir, "sidecar-race.local/k8s-tools", &body, &packages)?;
    let p = "k8s.io/component-base/version";
    let c = "k8s.io/client-go/pkg/version";
    let ldflags = format!(
        "-s -w -X {p}.gitVersion={v} -X {p}.gitMajor=1 -X {p}.gitMinor={minor} \
         -X {p}.gitTreeState=clean -X {p}.gitCommit=0000000000000000000000000000000000000000 \
         -X {p}.buildDate=1970-01-01T00:00:00Z \
         -X {c}.gitVersion={v} -X {c}.gitMajor=1 -X {c}.gitMinor={minor}"
    );
    for (name, package) in KUBERNETES_BINARIES.iter().zip(&packages) {
        eprintln!("xtask: building {name} {v} (a cold build takes minutes; see docs/cluster.md)");
        build_one(go, &dir, name, package, &ldflags)?;
    }
    Ok(())
}

fn build_etcd(go: &Path) -> anyhow::Result<()> {
    let dir = etcd_dir();
    let package = "go.etcd.io/etcd/server/v3".to_string();
    let body = format!("require {package} {ETCD_VERSION}\n");
    wrapper(
        go,
        &dir,
        "sidecar-race.local/etcd",
        &body,
        std::slice::from_ref(&package),
    )?;
    eprintln!("xtask: building etcd {ETCD_VERSION}");
    build_one(go, &dir, "etcd", &package, "-s -w")
}

fn build_helm(go: &Path) -> anyhow::Result<()> {
    let dir = helm_dir();
    let package = "helm.sh/helm/v3/cmd/helm".to_string();
    let body = format!("require helm.sh/helm/v3 {HELM_VERSION}\n");
    wrapper(
        go,
        &dir,
        "sidecar-race.local/helm",
        &body,
        std::slice::from_ref(&package),
    )?;
    eprintln!("xtask: building helm {HELM_VERSION}");
    // As helm's Makefile does: `helm version` reports the pinned version, and the
    // Kubernetes version `helm template` and `helm lint` assume (without a cluster) is
    // that of the client-go it is built with, not the 1.20 compiled in as a fallback.
    let client_go =
        output(go_cmd(go, &dir).args(["list", "-m", "-f", "{{.Version}}", "k8s.io/client-go"]))
            .context("no k8s.io/client-go in helm's module graph")?;
    let minor = client_go
        .strip_prefix("v0.")
        .and_then(|v| v.split('.').next())
        .with_context(|| format!("unexpected client-go version {client_go}"))?;
    let mut ldflags = format!("-s -w -X helm.sh/helm/v3/internal/version.version={HELM_VERSION}");
    for package in [
        "helm.sh/helm/v3/pkg/lint/rules",
        "helm.sh/helm/v3/pkg/chartutil",
    ] {
        ldflags.push_str(&format!(
            " -X {package}.k8sVersionMajor=1 -X {package}.k8sVersionMinor={minor}"
        ));
    }
    build_one(go, &dir, "helm", &package, &ldflags)
}

/// The operator's `cmd/operator`, with its version in the ldflags as its Makefile sets
/// it (the operator writes it into what it manages). Its submodules `pkg/apis/monitoring`
/// and `pkg/client` are tagged with the same version.
fn build_operator(go: &Path) -> anyhow::Result<()> {
    let dir = operator_dir();
    fs::create_dir_all(&dir)?;
    let v = OPERATOR_VERSION;
    let module = "github.com/prometheus-operator/prometheus-operator";
    let info = download(go, &dir, &format!("{module}@{v}"))?;
    let upstream = fs::read_to_string(info["GoMod"].as_str().context("no GoMod")?)?;
    let body = format!(
        "require {module} {v}\n\n{}",
        replace_block(&local_replacements(&upstream), v)
    );
    let package = format!("{module}/cmd/operator");
    wrapper(
        go,
        &dir,
        "sidecar-race.local/prometheus-operator",
        &body,
        std::slice::from_ref(&package),
    )?;
    eprintln!("xtask: building the Prometheus Operator {v}");
    build_one(go, &dir, "operator", &package, &prometheus_ldflags(v))
}

/// The version ldflags of Prometheus' own `.promu.yml` (the operator's Makefile sets
/// the same): `--version` and `prometheus_build_info` report `version`.
fn prometheus_ldflags(version: &str) -> String {
    let c = "github.com/prometheus/common/version";
    format!(
        "-s -w -X {c}.Version={} -X {c}.Revision=unknown -X {c}.Branch=unknown \
         -X {c}.BuildUser=sidecar-race -X {c}.BuildDate=19700101-00:00:00",
        version.trim_start_matches('v')
    )
}

/// Prometheus' `cmd/prometheus`. Its Go module is tagged `v0.<major><minor>.<patch>`
/// (3.10.0 is v0.310.0). Tags: `remove_all_sd` with `enable_kubernetes_sd` keep only
/// the service discovery the operator's configuration uses (its plugins/ directory;
/// static and file discovery are always in), and without `builtinassets` there is no
/// embedded web UI, which nothing here needs (the API still answers).
fn build_prometheus(go: &Path) -> anyhow::Result<()> {
    let dir = prometheus_dir();
    fs::create_dir_all(&dir)?;
    let module = "github.com/prometheus/prometheus";
    let tag = prometheus_module_version(PROMETHEUS_VERSION)?;
    let info = download(go, &dir, &format!("{module}@{tag}"))?;
    let upstream = fs::read_to_string(info["GoMod"].as_str().context("no GoMod")?)?;
    let body = format!(
        "require {module} {tag}\n\n{}",
        published_replacements(&upstream)
    );
    let package = format!("{module}/cmd/prometheus");
    wrapper(
        go,
        &dir,
        "sidecar-race.local/prometheus",
        &body,
        std::slice::from_ref(&package),
    )?;
    eprintln!("xtask: building Prometheus {PROMETHEUS_VERSION} (Kubernetes discovery only)");
    build_tagged(
        go,
        &dir,
        "prometheus",
        &package,
        &prometheus_ldflags(PROMETHEUS_VERSION),
        "remove_all_sd,enable_kubernetes_sd",
        false,
    )
}

/// Prometheus `vX.Y.Z` as its Go module tags it: `v0.<X><Y, two digits>.<Z>`.
fn prometheus_module_version(version: &str) -> anyhow::Result<String> {
    let parts: Vec<u32> = version
        .trim_start_matches('v')
        .split('.')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .with_context(|| format!("Prometheus version {version} is not vX.Y.Z"))?;
    let [major, minor, patch] = parts[..] else {
        bail!("Prometheus version {version} is not vX.Y.Z");
    };
    Ok(format!("v0.{major}{minor:02}.{patch}"))
}

/// The Prometheus Operator's source tree in Go's module cache (for its CRDs).
pub fn operator_source() -> anyhow::Result<PathBuf> {
    module_source(&format!(
        "github.com/prometheus-operator/prometheus-operator@{OPERATOR_VERSION}"
    ))
}

/// A module's source tree in Go's module cache, downloaded when missing.
fn module_source(module: &str) -> anyhow::Result<PathBuf> {
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

/// OpenShift's SecurityContextConstraints CRD, from the openshift/api module in Go's
/// module cache (the cluster tier installs it to check the chart's SCC against its
/// schema on the real API server).
pub fn scc_crd() -> anyhow::Result<PathBuf> {
    let crd = module_source(&format!("github.com/openshift/api@{OPENSHIFT_API_VERSION}"))?
        .join("security/v1/zz_generated.crd-manifests")
        .join("0000_03_config-operator_01_securitycontextconstraints.crd.yaml");
    anyhow::ensure!(crd.exists(), "no SCC CRD at {}", crd.display());
    Ok(crd)
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

    #[test]
    fn prometheus_versions_map_to_its_go_module_tags() {
        assert_eq!(
            super::prometheus_module_version("v3.10.0").unwrap(),
            "v0.310.0"
        );
        assert_eq!(
            super::prometheus_module_version("v3.7.3").unwrap(),
            "v0.307.3"
        );
        assert!(super::prometheus_module_version("v3.10").is_err());
    }
}
