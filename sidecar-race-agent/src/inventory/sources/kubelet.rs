//! `--pods-from kubelet`: polls the kubelet's `/pods` (`https://$NODE_IP:10250/pods`)
//! with the pod's service-account token, keeping per-node agents off the API server.
//! Needs `nodes/proxy` get in RBAC.

use std::{sync::Arc, time::Duration};

use kube::{Client, Config};
use tokio::sync::mpsc;

use super::{
    health::{SourceStats, with_causes},
    list::full_list,
    options::SourceOptions,
    pacer::Pacer,
    update::PodUpdate,
};

const DEFAULT_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";
const DEFAULT_CA: &str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";

/// A client for the kubelet. The token is re-read as it rotates (kube's token_file).
pub fn client(opts: &SourceOptions) -> Result<Client, String> {
    let ip = opts
        .node_ip
        .as_deref()
        .ok_or("the kubelet pod source needs --node-ip (NODE_IP from the downward API)")?;
    let host = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.to_string()
    };
    let url = format!("https://{host}:{}", opts.kubelet_port)
        .parse()
        .map_err(|e| format!("bad kubelet address {ip}: {e}"))?;
    if opts.kubelet_insecure {
        tracing::warn!(
            "--kubelet-insecure: the kubelet's TLS certificate is NOT verified; the service-account token is sent to whatever answers at {url} (anyone who can intercept this node's traffic to it can take the token)"
        );
    }
    let mut config = Config::new(url);
    config.accept_invalid_certs = opts.kubelet_insecure;
    let ca = opts.kubelet_ca.clone().or_else(|| {
        std::path::Path::new(DEFAULT_CA)
            .exists()
            .then(|| DEFAULT_CA.into())
    });
    if !opts.kubelet_insecure {
        // kube builds its TLS verifier from `root_cert`, and without one from the
        // system's roots, which the FROM-scratch image does not have ("No CA
        // certificates were loaded from the system", seen on a real cluster);
        // `root_cert_file` only reloads the bundle later, for rotation.
        if let Some(path) = &ca {
            config.root_cert = Some(ca_bundle(path)?);
        }
        config.root_cert_file = ca;
    }
    let token = opts.token_file.clone().or_else(|| {
        std::path::Path::new(DEFAULT_TOKEN)
            .exists()
            .then(|| DEFAULT_TOKEN.into())
    });
    config.auth_info.token_file = token.map(|p| p.display().to_string());
    config.connect_timeout = Some(Duration::from_secs(5));
    config.read_timeout = Some(Duration::from_secs(15));
    Client::try_from(config).map_err(|e| format!("cannot build the kubelet client: {e}"))
}

/// The DER certificates of a PEM bundle.
fn ca_bundle(path: &std::path::Path) -> Result<Vec<Vec<u8>>, String> {
    let pem = std::fs::read(path)
        .map_err(|e| format!("cannot read the kubelet CA {}: {e}", path.display()))?;
    let certs: Vec<Vec<u8>> = pem::parse_many(&pem)
        .map_err(|e| format!("the kubelet CA {} is not PEM: {e}", path.display()))?
        .into_iter()
        .filter(|p| p.tag() == "CERTIFICATE")
        .map(pem::Pem::into_contents)
        .collect();
    if certs.is_empty() {
        return Err(format!(
            "the kubelet CA {} holds no certificate",
            path.display()
        ));
    }
    Ok(certs)
}

pub async fn run(opts: SourceOptions, tx: mpsc::Sender<PodUpdate>, stats: Arc<SourceStats>) {
    let client = match client(&opts) {
        Ok(c) => c,
        Err(e) => {
            stats.error();
            tracing::error!("pod source kubelet: {e}; attribution by cgroup only");
            return;
        }
    };
    poll(
        client,
        Pacer::new(opts.poll_interval, opts.refresh),
        tx,
        stats,
    )
    .await
}

/// Polls `/pods` as `pacer` says until `tx` closes.
pub async fn poll(
    client: Client,
    mut pacer: Pacer,
    tx: mpsc::Sender<PodUpdate>,
    stats: Arc<SourceStats>,
) {
    let mut failing = false;
    let interval = pacer.interval();
    loop {
        pacer.wait().await;
        match fetch(&client).await {
            Ok(items) => {
                if failing {
                    tracing::info!("pod source kubelet: recovered");
                    failing = false;
                }
                let update = full_list(items, &stats, "kubelet");
                if tx.send(update).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                stats.error();
                if !failing {
                    tracing::warn!(
                        "pod source kubelet: {e}; retrying every {interval:?}, attribution by cgroup continues"
                    );
                }
                failing = true;
            }
        }
    }
}

async fn fetch(client: &Client) -> Result<Vec<serde_json::Value>, String> {
    let req = http::Request::get("/pods")
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    let text = client
        .request_text(req)
        .await
        .map_err(|e| format!("GET /pods: {}", with_causes(&e)))?;
    let list: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("/pods is not JSON: {e}"))?;
    match list.get("items") {
        Some(serde_json::Value::Array(items)) => Ok(items.clone()),
        _ => Err("/pods returned no items list".into()),
    }
}
