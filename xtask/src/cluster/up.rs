//! `cargo xtask cluster up`: PKI, the node bridge, the runtime (containerd, CRI-O or
//! containerd 2, on the CNI bridge, with the local images), etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler, kube-proxy, the kubelet (of the Kubernetes
//! asked for); then the agent installed from deploy/ and deploy/monitoring.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use super::{
    bpffs,
    build::{self, etcd_bin},
    clients::{http_get, kubectl},
    down, egress, host,
    install::install_agent,
    kubernetes::Kubernetes,
    modules,
    node::{
        CGROUP_ROOT, LOG_DIR, NODE_IP, NODE_NAME, POD_CIDR, SERVICE_CIDR, STATE_DIR,
        admin_kubeconfig, state,
    },
    pki, procs,
    runtime::Runtime,
    status::{self, Earlier},
};
use crate::run::{checked, output};

/// Starts the cluster of `kubernetes` on `runtime` (containerd 2 for 1.36, see
/// `Kubernetes::runtime`) and installs the agent; the admin kubeconfig's path. On
/// failure everything started is taken down again (SR_CLUSTER_KEEP=1 keeps it for a
/// look).
pub fn up(runtime: Runtime, kubernetes: Kubernetes) -> anyhow::Result<PathBuf> {
    let runtime = kubernetes.runtime(runtime)?;
    clear_earlier()?;
    let modules_loaded = host::preflight()?;
    let mut missing = build::missing();
    missing.extend(runtime.missing());
    missing.extend(kubernetes.missing());
    if !missing.is_empty() {
        bail!(
            "the cluster binaries are not built ({}): run `cargo xtask setup`",
            missing
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let started = Instant::now();
    let result = start(runtime, kubernetes, &modules_loaded).and_then(|()| install_agent(runtime));
    match result {
        Ok(()) => {
            eprintln!(
                "xtask: cluster up (Kubernetes {}) on {} in {} s; logs in {LOG_DIR}",
                kubernetes.version(),
                runtime.label(),
                started.elapsed().as_secs()
            );
            Ok(admin_kubeconfig())
        }
        Err(e) if std::env::var_os("SR_CLUSTER_KEEP").is_some() => Err(e),
        Err(e) => {
            eprintln!(
                "xtask: cluster up failed; taking down what it started (SR_CLUSTER_KEEP=1 keeps it)"
            );
            if let Err(d) = down::teardown() {
                eprintln!("xtask: and taking it down failed too: {d:#}");
            }
            Err(e)
        }
    }
}

/// Fails when a cluster is already up; takes down one an earlier run left with
/// nothing of it running (a killed run, a restarted VM).
pub fn clear_earlier() -> anyhow::Result<()> {
    match status::earlier() {
        Some(Earlier::Running(who)) => {
            bail!("a cluster is already up ({who}): run `cargo xtask cluster down` first")
        }
        // Nothing of it runs, so nobody is using it: removing it loses nothing.
        Some(Earlier::Stale(what)) => {
            eprintln!("xtask: {what}; taking it down before starting");
            down::teardown().context("removing the cluster an earlier run left")?;
        }
        None => {}
    }
    Ok(())
}

fn start(
    runtime: Runtime,
    kubernetes: Kubernetes,
    modules_loaded: &[String],
) -> anyhow::Result<()> {
    let _ = fs::remove_dir_all(LOG_DIR);
    fs::create_dir_all(STATE_DIR)?;
    kubernetes.record()?;
    modules::record(modules_loaded)?;
    host::save_sysctls()?;
    let pki_dir = state("pki");
    pki::generate(&pki_dir)?;
    let server = format!("https://{NODE_IP}:6443");
    for (stem, _, _) in pki::CLIENTS {
        fs::write(
            state(&format!("{stem}.kubeconfig")),
            pki::kubeconfig(&pki_dir, stem, &server),
        )?;
    }
    host::create_bridge()?;
    egress::install()?;
    for (addr, port, who) in host::PORTS {
        if addr == NODE_IP {
            host::port_free(addr, port, who)?;
        }
    }
    host::create_cgroups()?;
    host::share_netns_dir()?;
    bpffs::prepare()?;
    runtime.start()?;
    start_etcd()?;
    start_apiserver(&pki_dir, kubernetes)?;
    start_controllers(&pki_dir, kubernetes)?;
    // The kubelet first: kube-proxy reads the node IP from the Node it registers.
    start_kubelet(&pki_dir, runtime, kubernetes)?;
    start_kube_proxy(kubernetes)?;
    checked(kubectl().args([
        "wait",
        "--for=condition=Ready",
        &format!("node/{NODE_NAME}"),
        "--timeout=120s",
    ]))
    .with_context(|| {
        format!(
            "the node did not become Ready; the end of the kubelet's log:\n{}",
            procs::log_tail("kubelet", 25)
        )
    })?;
    Ok(())
}

fn start_etcd() -> anyhow::Result<()> {
    let data = state("etcd");
    procs::spawn(
        "etcd",
        Command::new(etcd_bin())
            .args(["--name", NODE_NAME, "--data-dir"])
            .arg(&data)
            .args([
                "--listen-client-urls=http://127.0.0.1:2379",
                "--advertise-client-urls=http://127.0.0.1:2379",
                "--listen-peer-urls=http://127.0.0.1:2380",
                "--initial-advertise-peer-urls=http://127.0.0.1:2380",
                &format!("--initial-cluster={NODE_NAME}=http://127.0.0.1:2380"),
                // A throwaway cluster: no fsync, much faster on a shared disk.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ]),
    )?;
    procs::wait_ready("etcd", Duration::from_secs(30), || {
        http_get("127.0.0.1:2379", "/health").is_some_and(|b| b.contains("\"health\":\"true\""))
    })
}

fn start_apiserver(pki: &Path, kubernetes: Kubernetes) -> anyhow::Result<()> {
    let p = pki.display();
    procs::spawn(
        "kube-apiserver",
        Command::new(kubernetes.bin("kube-apiserver")).args([
            "--etcd-servers=http://127.0.0.1:2379",
            &format!("--bind-address={NODE_IP}"),
            &format!("--advertise-address={NODE_IP}"),
            "--secure-port=6443",
            &format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            "--authorization-mode=Node,RBAC",
            // Added to the default plugins (which include ValidatingAdmissionPolicy).
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            &format!("--client-ca-file={p}/ca.crt"),
            &format!("--tls-cert-file={p}/apiserver.crt"),
            &format!("--tls-private-key-file={p}/apiserver.key"),
            &format!("--kubelet-client-certificate={p}/apiserver-kubelet-client.crt"),
            &format!("--kubelet-client-key={p}/apiserver-kubelet-client.key"),
            &format!("--kubelet-certificate-authority={p}/ca.crt"),
            "--kubelet-preferred-address-types=InternalIP",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            &format!("--service-account-key-file={p}/sa.pub"),
            &format!("--service-account-signing-key-file={p}/sa.key"),
            "--profiling=false",
        ]),
    )?;
    procs::wait_ready("kube-apiserver", Duration::from_secs(90), || {
        output(kubectl().args(["get", "--raw", "/readyz"])).is_some_and(|o| o == "ok")
    })
}

fn start_controllers(pki: &Path, kubernetes: Kubernetes) -> anyhow::Result<()> {
    let p = pki.display();
    procs::spawn(
        "kube-controller-manager",
        Command::new(kubernetes.bin("kube-controller-manager"))
            .arg(format!(
                "--kubeconfig={}",
                state("controller-manager.kubeconfig").display()
            ))
            .args([
                "--bind-address=127.0.0.1",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                &format!("--service-account-private-key-file={p}/sa.key"),
                &format!("--root-ca-file={p}/ca.crt"),
                &format!("--cluster-signing-cert-file={p}/ca.crt"),
                &format!("--cluster-signing-key-file={p}/ca.key"),
                &format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            ]),
    )?;
    procs::spawn(
        "kube-scheduler",
        Command::new(kubernetes.bin("kube-scheduler"))
            .arg(format!(
                "--kubeconfig={}",
                state("scheduler.kubeconfig").display()
            ))
            .args(["--bind-address=127.0.0.1", "--leader-elect=false"]),
    )?;
    Ok(())
}

fn start_kube_proxy(kubernetes: Kubernetes) -> anyhow::Result<()> {
    let config = state("kube-proxy.yaml");
    // conntrack: 0 leaves the host's conntrack sysctls alone. NodePorts only on the
    // node IP, not on every host address; no localhost NodePorts (route_localnet).
    fs::write(
        &config,
        format!(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: {kc}
hostnameOverride: {NODE_NAME}
clusterCIDR: {POD_CIDR}
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: [\"{NODE_IP}/32\"]
iptables:
  localhostNodePorts: false
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
",
            kc = state("kube-proxy.kubeconfig").display()
        ),
    )?;
    procs::spawn(
        "kube-proxy",
        Command::new(kubernetes.bin("kube-proxy")).arg(format!("--config={}", config.display())),
    )?;
    procs::wait_ready("kube-proxy", Duration::from_secs(60), || {
        http_get("127.0.0.1:10256", "/healthz").is_some()
    })
}

fn start_kubelet(pki: &Path, runtime: Runtime, kubernetes: Kubernetes) -> anyhow::Result<()> {
    let p = pki.display();
    let config = state("kubelet.yaml");
    fs::write(
        &config,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {NODE_IP}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: {p}/kubelet-serving.crt
tlsPrivateKeyFile: {p}/kubelet-serving.key
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {p}/ca.crt}}
authorization:
  mode: Webhook
cgroupDriver: cgroupfs
cgroupRoot: /{CGROUP_ROOT}
containerRuntimeEndpoint: unix://{sock}
failSwapOn: false
# The root filesystem's capacity is not measured inside every VM sandbox.
localStorageCapacityIsolation: false
clusterDomain: cluster.local
resolvConf: \"\"
# 100 turns image garbage collection off: containerd 1.6 cannot pin the locally
# imported sandbox image against it (CRI-O pins it).
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {{memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}}
nodeStatusUpdateFrequency: 5s
serializeImagePulls: false
{extra}",
            sock = runtime.socket().display(),
            extra = kubernetes.kubelet_config(),
        ),
    )?;
    procs::spawn(
        "kubelet",
        Command::new(kubernetes.bin("kubelet")).args([
            &format!("--config={}", config.display()),
            &format!("--kubeconfig={}", state("kubelet.kubeconfig").display()),
            &format!("--root-dir={}", state("kubelet").display()),
            &format!("--hostname-override={NODE_NAME}"),
            &format!("--node-ip={NODE_IP}"),
        ]),
    )?;
    procs::wait_ready("kubelet", Duration::from_secs(60), || {
        http_get("127.0.0.1:10248", "/healthz").is_some()
    })
}
