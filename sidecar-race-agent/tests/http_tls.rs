//! TLS on the agent's port (`--tls-cert-file`, `--tls-key-file`): the real server
//! answers over TLS with the files' certificate, refuses plain HTTP there, serves a
//! renewed certificate to new connections without a restart, and keeps the one it
//! has when the new files do not parse.

use std::{path::PathBuf, sync::Arc, time::Duration};

use axum::{Router, routing::get};
use rustls::pki_types::{CertificateDer, ServerName};
use sidecar_race_agent::http::{
    self,
    tls::{Reloading, TlsFiles},
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Files {
    dir: PathBuf,
    files: TlsFiles,
}

impl Files {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("sr-tls-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = TlsFiles {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        };
        Self { dir, files }
    }

    /// Writes a new self-signed certificate for 127.0.0.1; its DER.
    fn renew(&self) -> CertificateDer<'static> {
        let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
        std::fs::write(&self.files.key, cert.signing_key.serialize_pem()).unwrap();
        std::fs::write(&self.files.cert, cert.cert.pem()).unwrap();
        cert.cert.der().clone()
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn serve(files: &TlsFiles) -> std::net::SocketAddr {
    let tls = Arc::new(Reloading::new(files.clone()).expect("the files load"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().route("/healthz", get(|| async { "ok\n" }));
    tokio::spawn(http::server::serve(
        listener,
        app,
        http::Limits::default(),
        Some(tls),
        std::future::pending(),
    ));
    addr
}

/// GET /healthz over TLS, trusting only `trusted`: the answer, and the certificate the
/// server showed.
async fn get_tls(
    addr: std::net::SocketAddr,
    trusted: &CertificateDer<'static>,
) -> Result<(String, CertificateDer<'static>), String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(trusted.clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let shown = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    let _ = tls.read_to_string(&mut answer).await;
    Ok((answer, shown.into_owned()))
}

#[tokio::test]
async fn the_agent_serves_tls_with_its_files_and_refuses_plain_http_there() {
    let f = Files::new("serve");
    let cert = f.renew();
    let addr = serve(&f.files).await;
    let (answer, shown) = get_tls(addr, &cert).await.expect("a TLS answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("ok\n"), "{answer}");
    assert_eq!(shown, cert);
    // Plain HTTP on the TLS port gets no HTTP answer.
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: agent\r\n\r\n")
        .await
        .unwrap();
    let mut plain = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut plain)).await;
    assert!(
        !String::from_utf8_lossy(&plain).contains("200"),
        "plain HTTP answered on the TLS port: {}",
        String::from_utf8_lossy(&plain)
    );
}

#[tokio::test]
async fn a_renewed_certificate_is_served_to_new_connections_and_a_broken_one_is_not() {
    let f = Files::new("renew");
    let first = f.renew();
    let addr = serve(&f.files).await;
    assert_eq!(get_tls(addr, &first).await.unwrap().1, first);
    // cert-manager renews the Secret; the kubelet updates the mounted files.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let second = f.renew();
    let mut shown = None;
    for _ in 0..50 {
        if let Ok((_, cert)) = get_tls(addr, &second).await {
            shown = Some(cert);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(shown.as_ref(), Some(&second), "the renewed certificate");
    // A key file that does not parse: the certificate served so far stays.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    std::fs::write(&f.files.key, "not a key").unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (answer, cert) = get_tls(addr, &second).await.expect("still served");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(cert, second);
}

#[test]
fn files_without_a_certificate_or_a_key_are_a_clear_error() {
    let f = Files::new("errors");
    f.renew();
    std::fs::write(&f.files.cert, "").unwrap();
    let e = f.files.load().unwrap_err().to_string();
    assert!(e.contains("holds no PEM `CERTIFICATE`"), "{e}");
    f.renew();
    std::fs::write(
        &f.files.key,
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let e = f.files.load().unwrap_err().to_string();
    assert!(e.contains("holds no PEM private key"), "{e}");
    let missing = TlsFiles {
        cert: f.dir.join("absent.crt"),
        key: f.files.key.clone(),
    };
    let e = missing.load().unwrap_err().to_string();
    assert!(e.contains("cannot read") && e.contains("absent.crt"), "{e}");
}
