//! A minimal HTTP/1.1 GET for talking to the agent in tests (no client library needed).

use std::{
    io::{Read, Write},
    net::TcpStream,
    time::Duration,
};

/// `GET path` on `addr`: (status, body), or None when nothing answers.
pub fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    get_as(addr, path, None)
}

/// `GET path` on `addr` with `Authorization: Bearer <token>` when given.
pub fn get_as(addr: &str, path: &str, token: Option<&str>) -> Option<(u16, String)> {
    get_within(addr, path, token, Duration::from_secs(10))
}

/// `GET path` giving up on a read that waits longer than `patience`: a guard against
/// a hung agent, not a measure of its speed.
pub fn get_within(
    addr: &str,
    path: &str,
    token: Option<&str>,
    patience: Duration,
) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(patience)).ok()?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )
    .ok()?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).ok()?;
    let resp = String::from_utf8_lossy(&resp).into_owned();
    let status = resp.split_whitespace().nth(1)?.parse().ok()?;
    let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Some((status, body))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// A free TCP port on loopback (bound and released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
