//! How xtask talks to the running cluster: `kubectl` as cluster-admin and a plain-HTTP
//! GET for the components' health endpoints (the runtimes' own clients are in
//! `runtime`).

use std::{
    io::{Read, Write},
    net::TcpStream,
    process::Command,
    time::Duration,
};

use super::{kubernetes::Kubernetes, node::admin_kubeconfig};

/// `kubectl` (the cached build of the Kubernetes `up` recorded) as cluster-admin.
pub fn kubectl() -> Command {
    let mut c = Command::new(Kubernetes::recorded().bin("kubectl"));
    c.arg("--kubeconfig").arg(admin_kubeconfig());
    c
}

/// A plain-HTTP GET on loopback; the body when the status is 200.
pub fn http_get(addr: &str, path: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr.parse().ok()?, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200")
        .then(|| body.to_string())
        .or_else(|| head.starts_with("HTTP/1.0 200").then(|| body.to_string()))
}
