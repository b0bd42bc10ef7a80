//! Which connections beyond the cap a health slot takes: those that send, within a
//! second, a whole request head (up to its blank line) that is a `GET` of `/healthz` or
//! `/readyz`. The head is read before the slot is taken, on a peek slot, so a client
//! that sends `GET /healthz ` and stalls holds no health slot: a health slot is held
//! only while a complete probe is answered. Anything else, a flood's request included,
//! is closed as soon as its first bytes show it is not a probe.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

/// The request lines a health slot serves (the path followed by a space or a query).
const PROBES: [&[u8]; 2] = [b"GET /healthz", b"GET /readyz"];

/// How long a connection beyond the cap may take to send its whole request head (and,
/// over TLS, to finish its handshake first).
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

/// The whole request head of a probe on `io` (up to and with its blank line, at most
/// `max` bytes), or `None` when it is not a probe, is longer, or the connection ends
/// first. The caller bounds the time.
pub async fn read_probe_head<I: AsyncRead + Unpin>(io: &mut I, max: usize) -> Option<Vec<u8>> {
    let mut head = Vec::with_capacity(256);
    let mut buf = [0u8; 512];
    loop {
        let n = io.read(&mut buf).await.ok()?;
        if n == 0 {
            return None; // closed
        }
        head.extend_from_slice(&buf[..n]);
        if is_probe(&head) == Some(false) || head.len() > max {
            return None;
        }
        // Only the new bytes (and the three before them) can complete the blank line.
        let from = head.len().saturating_sub(n + 3);
        if head[from..].windows(4).any(|w| w == b"\r\n\r\n") {
            return (is_probe(&head) == Some(true)).then_some(head);
        }
    }
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

    #[tokio::test]
    async fn a_probe_head_is_read_whole_and_anything_else_is_not() {
        let head = async |sent: &'static [u8]| {
            let (mut client, mut server) = tokio::io::duplex(4096);
            tokio::io::AsyncWriteExt::write_all(&mut client, sent)
                .await
                .unwrap();
            drop(client);
            read_probe_head(&mut server, 1024).await
        };
        let probe = b"GET /healthz HTTP/1.1\r\nHost: a\r\nUser-Agent: kube-probe/1.34\r\n\r\n";
        assert_eq!(head(probe).await.as_deref(), Some(&probe[..]));
        // A stalled prefix ends with its connection, and is never a whole head.
        assert_eq!(head(b"GET /healthz ").await, None);
        assert_eq!(head(b"GET /healthz HTTP/1.1\r\nHost: a\r\n").await, None);
        assert_eq!(head(b"GET /metrics HTTP/1.1\r\n\r\n").await, None);
        let long: &'static [u8] = Vec::leak(
            [
                &b"GET /readyz HTTP/1.1\r\nX: "[..],
                &[b'a'; 2000],
                b"\r\n\r\n",
            ]
            .concat(),
        );
        assert_eq!(head(long).await, None, "longer than the bound");
    }
}
