//! Which connections beyond the cap a health slot takes: those whose first bytes are a
//! `GET` of `/healthz` or `/readyz`, peeked (left for the server to read) within a
//! second. Anything else, a flood's request included, is closed without taking the
//! slot from the kubelet's probes for longer than its first bytes take to arrive.

use std::time::Duration;

use tokio::net::TcpStream;

/// The request lines a health slot serves (the path followed by a space or a query).
const PROBES: [&[u8]; 2] = [b"GET /healthz", b"GET /readyz"];

/// How long a connection may take to show its request line.
pub const PEEK_TIMEOUT: Duration = Duration::from_secs(1);

/// Whether `bytes` (the start of a request) asks for a health path; `None` while too
/// few bytes arrived to tell.
pub fn is_probe(bytes: &[u8]) -> Option<bool> {
    for probe in PROBES {
        let n = bytes.len().min(probe.len());
        if bytes[..n] != probe[..n] {
            continue;
        }
        return match bytes.get(probe.len()) {
            None => None,
            Some(b' ' | b'?') => Some(true),
            Some(_) => Some(false),
        };
    }
    Some(false)
}

/// Whether the client on `stream` asks for a health path within [`PEEK_TIMEOUT`].
pub async fn asks_for_health(stream: &TcpStream) -> bool {
    let peeked = async {
        let mut buf = [0u8; 16];
        loop {
            let n = stream.peek(&mut buf).await.ok()?;
            if n == 0 {
                return Some(false); // closed
            }
            match is_probe(&buf[..n]) {
                Some(answer) => return Some(answer),
                // Part of the line: peek returns at once while nothing new came.
                None => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    };
    matches!(
        tokio::time::timeout(PEEK_TIMEOUT, peeked).await,
        Ok(Some(true))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_get_of_a_health_path_is_a_probe() {
        for yes in [
            &b"GET /healthz HTTP/1.1\r\n"[..],
            b"GET /readyz HTTP/1.1",
            b"GET /healthz?x=1 HTTP/1.1",
        ] {
            assert_eq!(
                is_probe(yes),
                Some(true),
                "{}",
                String::from_utf8_lossy(yes)
            );
        }
        for no in [
            &b"GET /metrics HTTP/1.1"[..],
            b"GET /api/v1/incidents HTTP/1.1",
            b"GET /healthzz HTTP/1.1",
            b"POST /healthz HTTP/1.1",
            b"X",
        ] {
            assert_eq!(is_probe(no), Some(false), "{}", String::from_utf8_lossy(no));
        }
        for partial in [&b""[..], b"GE", b"GET /heal", b"GET /healthz"] {
            assert_eq!(
                is_probe(partial),
                None,
                "{}",
                String::from_utf8_lossy(partial)
            );
        }
    }
}
