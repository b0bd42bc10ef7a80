//! TLS on the agent's port (`--tls-cert-file`, `--tls-key-file`): PEM files, read again
//! when either changes (cert-manager renews a Secret in place, the kubelet updates the
//! mounted files), so a renewed certificate is served without a restart. A file that
//! cannot be read or does not parse keeps the certificate served so far, said once
//! per change.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use parking_lot::Mutex;
use rustls::{
    ServerConfig,
    pki_types::{
        CertificateDer, PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer,
    },
};
use tokio_rustls::TlsAcceptor;

/// How often at most the files' modification times are looked at (on a connection).
const RECHECK: Duration = Duration::from_secs(1);

/// Why a certificate and key cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} holds no PEM `CERTIFICATE`")]
    NoCertificate { path: PathBuf },
    #[error(
        "{path} holds no PEM private key (`PRIVATE KEY`, `RSA PRIVATE KEY` or `EC PRIVATE KEY`)"
    )]
    NoKey { path: PathBuf },
    #[error("{path}: not PEM: {source}")]
    Pem {
        path: PathBuf,
        source: pem::PemError,
    },
    #[error("the certificate and key cannot be served: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The certificate chain and key files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsFiles {
    /// Both files' modification times (`None`: one cannot be read).
    fn stamp(&self) -> Option<(SystemTime, SystemTime)> {
        let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        Some((modified(&self.cert)?, modified(&self.key)?))
    }

    /// The server configuration for these files, as they are now.
    pub fn load(&self) -> Result<ServerConfig, TlsError> {
        let blocks = |path: &Path| -> Result<Vec<pem::Pem>, TlsError> {
            let bytes = std::fs::read(path).map_err(|source| TlsError::Read {
                path: path.to_path_buf(),
                source,
            })?;
            pem::parse_many(bytes).map_err(|source| TlsError::Pem {
                path: path.to_path_buf(),
                source,
            })
        };
        let chain: Vec<CertificateDer<'static>> = blocks(&self.cert)?
            .into_iter()
            .filter(|p| p.tag() == "CERTIFICATE")
            .map(|p| CertificateDer::from(p.into_contents()))
            .collect();
        if chain.is_empty() {
            return Err(TlsError::NoCertificate {
                path: self.cert.clone(),
            });
        }
        let key: PrivateKeyDer<'static> = blocks(&self.key)?
            .into_iter()
            .find_map(|p| match p.tag() {
                "PRIVATE KEY" => Some(PrivatePkcs8KeyDer::from(p.into_contents()).into()),
                "RSA PRIVATE KEY" => Some(PrivatePkcs1KeyDer::from(p.into_contents()).into()),
                "EC PRIVATE KEY" => Some(PrivateSec1KeyDer::from(p.into_contents()).into()),
                _ => None,
            })
            .ok_or_else(|| TlsError::NoKey {
                path: self.key.clone(),
            })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

/// The acceptor for the files' current contents.
pub struct Reloading {
    files: TlsFiles,
    current: Mutex<Current>,
}

struct Current {
    acceptor: TlsAcceptor,
    /// The files' modification times the acceptor was made from, or last refused.
    stamp: Option<(SystemTime, SystemTime)>,
    checked: Instant,
}

impl Reloading {
    /// Loads the files now: an agent asked for TLS does not start without it.
    pub fn new(files: TlsFiles) -> Result<Self, TlsError> {
        let stamp = files.stamp();
        let acceptor = TlsAcceptor::from(Arc::new(files.load()?));
        Ok(Self {
            files,
            current: Mutex::new(Current {
                acceptor,
                stamp,
                checked: Instant::now(),
            }),
        })
    }

    /// The acceptor to use for a new connection: the files' contents as of at most a
    /// second ago.
    pub fn acceptor(&self) -> TlsAcceptor {
        let mut current = self.current.lock();
        if current.checked.elapsed() >= RECHECK {
            current.checked = Instant::now();
            let stamp = self.files.stamp();
            if stamp != current.stamp {
                current.stamp = stamp;
                match self.files.load() {
                    Ok(config) => {
                        current.acceptor = TlsAcceptor::from(Arc::new(config));
                        tracing::info!(cert = %self.files.cert.display(), "TLS certificate reloaded");
                    }
                    Err(e) => tracing::warn!(
                        "TLS certificate not reloaded, the one loaded before is served: {e}"
                    ),
                }
            }
        }
        current.acceptor.clone()
    }
}
