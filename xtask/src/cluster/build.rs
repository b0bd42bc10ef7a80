//! The cluster's binaries, built once per machine from their Go modules and cached
//! outside the checkout, keyed by version: `~/.cache/sidecar-race/go/k8s-<version>/bin/`
//! (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy,
//! kubectl), `~/.cache/sidecar-race/go/etcd-<version>/bin/etcd` and the Prometheus
//! Operator's `~/.cache/sidecar-race/go/prometheus-operator-<version>/bin/operator`. A
//! fresh clone on the same machine (CI's) reuses them; Go's own module and build caches
//! sit beside them.
//!
//! `k8s.io/kubernetes` replaces its staging modules with local paths, and the operator
//! its `pkg/apis/monitoring` and `pkg/client`, so each is built through a wrapper module
//! (`go_module.rs`). Binaries carry the version ldflags, so `kubectl version` and
//! `/version` report the pinned version. Each binary's build time is appended to
//! `build.log`.
//!
//! Helm, which the chart's tests drive (deploy/helm/), is built the same way into
//! `~/.cache/sidecar-race/go/helm-<version>/bin/helm`, and Prometheus, which the
//! cluster tier runs on the operator's generated configuration, into
//! `~/.cache/sidecar-race/go/prometheus-<version>/bin/prometheus`: with Kubernetes
//! service discovery only and without the embedded web UI (its build tags).

use std::{
    fs,
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{Context, bail};

use super::go_module::{
    build_one, build_tagged, cache_root, download, go, go_cmd, local_replacements, module_source,
    published_replacements, replace_block, wrapper,
};
use super::versions::{
    ETCD_VERSION, HELM_VERSION, KUBERNETES_VERSION, OPENSHIFT_API_VERSION, OPERATOR_VERSION,
    PROMETHEUS_VERSION,
};
use crate::run::output;

pub const KUBERNETES_BINARIES: [&str; 6] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
    "kubectl",
];

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
