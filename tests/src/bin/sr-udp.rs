//! A stand-in for a datagram sidecar (statsd on UDP, syslog on a Unix datagram socket)
//! and for the app that sends to it, each counting exactly what was lost:
//!
//! - `sr-udp recv ADDR [--delay-ms N]`: binds `ADDR` (`127.0.0.1:8125`, `[::1]:8125`;
//!   a path, or `@name` for an abstract Unix name, binds a Unix datagram socket) after a
//!   delay and answers each datagram with its sequence number, until SIGTERM; then it
//!   closes its socket at once, as a sidecar exiting at SIGTERM does.
//! - `sr-udp send ADDR [--interval-ms N] [--connected] [--attempts N] [--keep-sending]`:
//!   sends numbered datagrams every interval until one is answered (or `--attempts`
//!   sends; `--keep-sending` does not stop at an answer), then waits for late answers.
//!   Its last line: `sr-udp: L lost, S sent, E refused at send`. For UDP, `lost` counts
//!   datagrams the kernel took (`send` succeeded) that were never answered: dropped
//!   because no socket held the port. A connected UDP socket's send that fails with
//!   `ECONNREFUSED` (the ICMP of an earlier drop, reported on the next send) sent
//!   nothing and is not among them. For a Unix socket, `lost` counts the sends refused
//!   (`ENOENT`, `ECONNREFUSED`: the kernel's refusal is the loss) and any unanswered.

use std::{
    collections::BTreeSet,
    io::ErrorKind,
    net::{SocketAddr, UdpSocket},
    os::{
        linux::net::SocketAddrExt,
        unix::net::{SocketAddr as UnixAddr, UnixDatagram},
    },
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

static TERM: AtomicBool = AtomicBool::new(false);

extern "C" fn on_term(_: libc::c_int) {
    TERM.store(true, Ordering::SeqCst);
}

struct Opts {
    addr: String,
    interval_ms: u64,
    attempts: u64,
    delay_ms: u64,
    connected: bool,
    keep_sending: bool,
}

/// One socket of either family, as both ends use it.
enum Sock {
    Udp(UdpSocket),
    Unix(UnixDatagram),
}

impl Sock {
    fn recv_from(&self, buf: &mut [u8]) -> std::io::Result<(usize, Option<Reply>)> {
        match self {
            Sock::Udp(s) => s.recv_from(buf).map(|(n, a)| (n, Some(Reply::Udp(a)))),
            Sock::Unix(s) => s.recv_from(buf).map(|(n, a)| (n, Some(Reply::Unix(a)))),
        }
    }
}

enum Reply {
    Udp(SocketAddr),
    Unix(UnixAddr),
}

fn is_unix(addr: &str) -> bool {
    addr.starts_with('/') || addr.starts_with('@')
}

fn unix_addr(path: &str) -> UnixAddr {
    match path.strip_prefix('@') {
        Some(name) => UnixAddr::from_abstract_name(name.as_bytes()),
        None => UnixAddr::from_pathname(path),
    }
    .unwrap_or_else(|e| panic!("address {path}: {e}"))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| usage("a mode"));
    let mut o = Opts {
        addr: args.next().unwrap_or_else(|| usage("an address")),
        interval_ms: 50,
        attempts: 0,
        delay_ms: 0,
        connected: false,
        keep_sending: false,
    };
    while let Some(a) = args.next() {
        let mut n = || -> u64 {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| usage(&a))
        };
        match a.as_str() {
            "--interval-ms" => o.interval_ms = n(),
            "--attempts" => o.attempts = n(),
            "--delay-ms" => o.delay_ms = n(),
            "--connected" => o.connected = true,
            "--keep-sending" => o.keep_sending = true,
            _ => usage(&a),
        }
    }
    match mode.as_str() {
        "recv" => recv(&o),
        "send" => send(&o),
        _ => usage(&mode),
    }
}

fn recv(o: &Opts) {
    // SAFETY: installs a handler that only stores to an atomic.
    unsafe {
        libc::signal(
            libc::SIGTERM,
            on_term as extern "C" fn(libc::c_int) as libc::sighandler_t,
        )
    };
    std::thread::sleep(Duration::from_millis(o.delay_ms));
    let sock = if is_unix(&o.addr) {
        if !o.addr.starts_with('@') {
            let _ = std::fs::remove_file(&o.addr);
        }
        Sock::Unix(UnixDatagram::bind_addr(&unix_addr(&o.addr)).expect("bind"))
    } else {
        let addr: SocketAddr = o.addr.parse().expect("address");
        Sock::Udp(UdpSocket::bind(addr).expect("bind"))
    };
    match &sock {
        Sock::Udp(s) => s.set_read_timeout(Some(Duration::from_millis(20))),
        Sock::Unix(s) => s.set_read_timeout(Some(Duration::from_millis(20))),
    }
    .expect("timeout");
    println!("sr-udp: bound {}", o.addr);
    let mut buf = [0u8; 64];
    let mut got = 0u64;
    while !TERM.load(Ordering::SeqCst) {
        let Ok((n, from)) = sock.recv_from(&mut buf) else {
            continue;
        };
        got += 1;
        // The answer carries the datagram's own number back.
        match (&sock, from) {
            (Sock::Udp(s), Some(Reply::Udp(a))) => {
                let _ = s.send_to(&buf[..n], a);
            }
            (Sock::Unix(s), Some(Reply::Unix(a))) => {
                if let Some(p) = a.as_pathname() {
                    let _ = s.send_to(&buf[..n], p);
                } else if let Some(name) = a.as_abstract_name() {
                    let _ = s.send_to_addr(
                        &buf[..n],
                        &UnixAddr::from_abstract_name(name).expect("name"),
                    );
                }
            }
            _ => {}
        }
    }
    if !o.addr.starts_with('@') && is_unix(&o.addr) {
        let _ = std::fs::remove_file(&o.addr);
    }
    println!("sr-udp: received {got}");
}

fn send(o: &Opts) {
    let sock = if is_unix(&o.addr) {
        // A reply address of its own (abstract, so nothing is left on disk).
        let me = format!("sr-udp-client-{}", std::process::id());
        let s =
            UnixDatagram::bind_addr(&UnixAddr::from_abstract_name(me.as_bytes()).expect("name"))
                .expect("bind the reply address");
        if o.connected {
            s.connect_addr(&unix_addr(&o.addr)).expect("connect");
        }
        Sock::Unix(s)
    } else {
        let to: SocketAddr = o.addr.parse().expect("address");
        let any: SocketAddr = if to.is_ipv6() { "[::]:0" } else { "0.0.0.0:0" }
            .parse()
            .expect("any");
        let s = UdpSocket::bind(any).expect("bind");
        if o.connected {
            s.connect(to).expect("connect");
        }
        Sock::Udp(s)
    };
    match &sock {
        Sock::Udp(s) => s.set_nonblocking(true),
        Sock::Unix(s) => s.set_nonblocking(true),
    }
    .expect("non-blocking");
    let (mut sent, mut refused_at_send) = (0u64, 0u64);
    let mut sent_seqs = BTreeSet::new();
    let mut answered = BTreeSet::new();
    let mut seq = 0u64;
    loop {
        let datagram = format!("{seq}");
        let res = match &sock {
            Sock::Udp(s) if o.connected => s.send(datagram.as_bytes()),
            Sock::Udp(s) => s.send_to(datagram.as_bytes(), o.addr.as_str()),
            Sock::Unix(s) if o.connected => s.send(datagram.as_bytes()),
            Sock::Unix(s) => s.send_to_addr(datagram.as_bytes(), &unix_addr(&o.addr)),
        };
        match res {
            Ok(_) => {
                sent += 1;
                sent_seqs.insert(seq);
            }
            Err(e)
                if e.kind() == ErrorKind::ConnectionRefused || e.kind() == ErrorKind::NotFound =>
            {
                refused_at_send += 1;
            }
            Err(e) => panic!("send: {e}"),
        }
        seq += 1;
        collect(&sock, &mut answered, Duration::from_millis(o.interval_ms));
        let done_by_answer = !answered.is_empty() && !o.keep_sending;
        if done_by_answer || (o.attempts > 0 && seq >= o.attempts) {
            break;
        }
    }
    // Answers still on their way.
    collect(&sock, &mut answered, Duration::from_millis(300));
    let unanswered = sent_seqs.difference(&answered).count() as u64;
    // A Unix send to a path nobody holds fails and sends nothing: that datagram is the
    // one lost. A UDP datagram the kernel took is lost when dropped unanswered.
    let lost = if is_unix(&o.addr) {
        refused_at_send + unanswered
    } else {
        unanswered
    };
    println!("sr-udp: {lost} lost, {sent} sent, {refused_at_send} refused at send");
}

/// Reads answers for `wait`: the sequence numbers they carry.
fn collect(sock: &Sock, answered: &mut BTreeSet<u64>, wait: Duration) {
    let until = Instant::now() + wait;
    let mut buf = [0u8; 64];
    while Instant::now() < until {
        match sock.recv_from(&mut buf) {
            Ok((n, _)) => {
                if let Some(s) = std::str::from_utf8(&buf[..n])
                    .ok()
                    .and_then(|t| t.parse().ok())
                {
                    answered.insert(s);
                }
            }
            // A connected socket's pending ICMP error is reported on a read too.
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {}
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

fn usage(what: &str) -> ! {
    eprintln!(
        "sr-udp: bad or missing {what}\n\
         usage: sr-udp recv ADDR [--delay-ms N] | \
         sr-udp send ADDR [--interval-ms N] [--connected] [--attempts N] [--keep-sending]"
    );
    std::process::exit(2)
}
