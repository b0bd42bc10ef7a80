//! The cluster's PKI, made with the openssl CLI: one CA, the API server's serving
//! certificate (the node IP, the `kubernetes` Service IP, loopback, the Service's DNS
//! names), client certificates for each component (the kubelet's with the
//! `system:node:<node>` / `system:nodes` identity that the Node authorizer and
//! NodeRestriction expect), the kubelet's serving certificate signed by the same CA
//! (so the API server, and the agent's kubelet pod source, verify it), and the
//! ServiceAccount token signing key pair. ECDSA P-256 for certificates: fast to make.

use std::{fs, path::Path, process::Command};

use anyhow::Context;

use super::node::{KUBERNETES_SERVICE_IP, NODE_IP, NODE_NAME};
use crate::run::checked;

/// A client identity: file stem, CN, O.
pub const CLIENTS: [(&str, &str, &str); 6] = [
    ("admin", "sidecar-race-admin", "system:masters"),
    (
        "apiserver-kubelet-client",
        "kube-apiserver-kubelet-client",
        "system:masters",
    ),
    ("controller-manager", "system:kube-controller-manager", ""),
    ("scheduler", "system:kube-scheduler", ""),
    ("kube-proxy", "system:kube-proxy", ""),
    ("kubelet", "system:node:sr-node", "system:nodes"),
];

fn openssl(dir: &Path) -> Command {
    let mut c = Command::new("openssl");
    c.current_dir(dir);
    c
}

/// `openssl req` making a new P-256 key (unencrypted) and a request or, with
/// `-x509`, a self-signed certificate.
fn key_and_request(dir: &Path) -> Command {
    let mut c = openssl(dir);
    c.args([
        "req",
        "-new",
        "-nodes",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
    ]);
    c
}

/// Writes everything into `dir`.
pub fn generate(dir: &Path) -> anyhow::Result<()> {
    fs::create_dir_all(dir)?;
    checked(key_and_request(dir).args([
        "-x509",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "3650",
        "-subj",
        "/CN=sidecar-race-cluster-ca",
    ]))
    .context("openssl failed to make the cluster CA (is openssl installed?)")?;
    let server_names = format!(
        "IP:{NODE_IP},IP:{KUBERNETES_SERVICE_IP},IP:127.0.0.1,DNS:localhost,DNS:kubernetes,\
         DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    );
    leaf(
        dir,
        "apiserver",
        "kube-apiserver",
        "",
        "serverAuth",
        Some(&server_names),
    )?;
    leaf(
        dir,
        "kubelet-serving",
        &format!("system:node:{NODE_NAME}"),
        "system:nodes",
        "serverAuth",
        Some(&format!("IP:{NODE_IP},DNS:{NODE_NAME}")),
    )?;
    for (stem, cn, o) in CLIENTS {
        leaf(dir, stem, cn, o, "clientAuth", None)?;
    }
    checked(openssl(dir).args(["genrsa", "-out", "sa.key", "2048"]))?;
    checked(openssl(dir).args(["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"]))?;
    Ok(())
}

/// `<stem>.key` and `<stem>.crt` signed by the CA.
fn leaf(
    dir: &Path,
    stem: &str,
    cn: &str,
    o: &str,
    usage: &str,
    sans: Option<&str>,
) -> anyhow::Result<()> {
    let subject = if o.is_empty() {
        format!("/CN={cn}")
    } else {
        format!("/O={o}/CN={cn}")
    };
    checked(key_and_request(dir).args([
        "-keyout",
        &format!("{stem}.key"),
        "-out",
        &format!("{stem}.csr"),
        "-subj",
        &subject,
    ]))?;
    let mut ext = format!(
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n\
         extendedKeyUsage={usage}\n"
    );
    if let Some(sans) = sans {
        ext.push_str(&format!("subjectAltName={sans}\n"));
    }
    let ext_file = format!("{stem}.ext");
    fs::write(dir.join(&ext_file), ext)?;
    checked(openssl(dir).args([
        "x509",
        "-req",
        "-in",
        &format!("{stem}.csr"),
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "365",
        "-out",
        &format!("{stem}.crt"),
        "-extfile",
        &ext_file,
    ]))?;
    fs::remove_file(dir.join(format!("{stem}.csr")))?;
    fs::remove_file(dir.join(ext_file))?;
    Ok(())
}

/// A kubeconfig for the client identity `stem`, against the API server at `server`.
pub fn kubeconfig(pki: &Path, stem: &str, server: &str) -> String {
    let p = pki.display();
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: sidecar-race
  cluster:
    server: {server}
    certificate-authority: {p}/ca.crt
users:
- name: {stem}
  user:
    client-certificate: {p}/{stem}.crt
    client-key: {p}/{stem}.key
contexts:
- name: sidecar-race
  context: {{cluster: sidecar-race, user: {stem}}}
current-context: sidecar-race
"
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_kubelet_client_is_the_node_identity() {
        let kubelet = super::CLIENTS.iter().find(|c| c.0 == "kubelet").unwrap();
        assert_eq!(kubelet.1, format!("system:node:{}", super::NODE_NAME));
        assert_eq!(kubelet.2, "system:nodes");
    }
}
