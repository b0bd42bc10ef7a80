//! Helpers shared by the integration tests that talk to a fake API server.

use std::{net::SocketAddr, path::PathBuf};

/// A kubeconfig file whose current context is the fake API server at `addr`, with a
/// bearer token, as a developer's would be; `tag` keeps concurrent tests apart.
pub fn kubeconfig_for(addr: SocketAddr, tag: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "sidecar-race-{tag}-kubeconfig-{}-{}",
        std::process::id(),
        addr.port()
    ));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{addr}\nusers:\n- name: dev\n  user:\n    token: dev-token\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: dev\ncurrent-context: fake\n"
        ),
    )
    .unwrap();
    path
}
