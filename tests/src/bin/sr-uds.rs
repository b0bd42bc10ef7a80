//! A stand-in for a sidecar serving on a Unix socket, and for its client:
//!
//! - `sr-uds listen PATH [--delay-ms N] [--replace] [--unlink-on-term] [--linger-ms N]`:
//!   binds (`--replace`: over a file left behind) and listens (after a delay), accepts
//!   until SIGTERM; with `--unlink-on-term` it then
//!   removes the path and keeps its socket open for `--linger-ms`, as a sidecar
//!   draining on a Unix socket does. A path starting with `@` is an abstract name.
//! - `sr-uds connect PATH [--interval-ms N] [--attempts N] [--keep-dialing]`: connects
//!   until it gets through (or `--attempts` connects; `--keep-dialing` never stops at
//!   success), printing how many were refused (ENOENT or ECONNREFUSED).
//! - `sr-uds sendto PATH [--interval-ms N] [--attempts N]`: a statsd-style datagram
//!   sender that never connects.

use std::{
    io::ErrorKind,
    os::{
        linux::net::SocketAddrExt,
        unix::net::{SocketAddr, UnixDatagram, UnixListener, UnixStream},
    },
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

static TERM: AtomicBool = AtomicBool::new(false);

extern "C" fn on_term(_: libc::c_int) {
    TERM.store(true, Ordering::SeqCst);
}

struct Opts {
    path: String,
    interval_ms: u64,
    attempts: u64,
    delay_ms: u64,
    linger_ms: u64,
    unlink_on_term: bool,
    keep_dialing: bool,
    replace: bool,
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| usage("a mode"));
    let mut o = Opts {
        path: args.next().unwrap_or_else(|| usage("a path")),
        interval_ms: 100,
        attempts: 0,
        delay_ms: 0,
        linger_ms: 0,
        unlink_on_term: false,
        keep_dialing: false,
        replace: false,
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
            "--linger-ms" => o.linger_ms = n(),
            "--unlink-on-term" => o.unlink_on_term = true,
            "--keep-dialing" => o.keep_dialing = true,
            "--replace" => o.replace = true,
            _ => usage(&a),
        }
    }
    match mode.as_str() {
        "listen" => listen(&o),
        "connect" => dial(&o, |addr| UnixStream::connect_addr(addr).map(drop)),
        "sendto" => {
            let sock = UnixDatagram::unbound().expect("a datagram socket");
            dial(&o, |addr| {
                sock.send_to_addr(b"requests:1|c", addr).map(drop)
            })
        }
        _ => usage("listen, connect or sendto"),
    }
}

fn address(path: &str) -> SocketAddr {
    match path.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes()),
        None => SocketAddr::from_pathname(path),
    }
    .unwrap_or_else(|e| panic!("address {path}: {e}"))
}

fn listen(o: &Opts) {
    // SAFETY: installs a handler that only stores to an atomic.
    unsafe {
        libc::signal(
            libc::SIGTERM,
            on_term as extern "C" fn(libc::c_int) as libc::sighandler_t,
        )
    };
    std::thread::sleep(Duration::from_millis(o.delay_ms));
    if o.replace && !o.path.starts_with('@') {
        // What a restarting server does with the file its crashed run left behind.
        let _ = std::fs::remove_file(&o.path);
    }
    let listener = UnixListener::bind_addr(&address(&o.path)).expect("bind");
    listener.set_nonblocking(true).expect("non-blocking");
    println!("sr-uds: listening on {}", o.path);
    while !TERM.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
    if o.unlink_on_term && !o.path.starts_with('@') {
        std::fs::remove_file(&o.path).expect("unlink");
        println!("sr-uds: unlinked {}", o.path);
    }
    std::thread::sleep(Duration::from_millis(o.linger_ms));
    drop(listener);
}

fn dial(o: &Opts, attempt: impl Fn(&SocketAddr) -> std::io::Result<()>) {
    let addr = address(&o.path);
    let (mut refused, mut n) = (0u64, 0u64);
    loop {
        n += 1;
        match attempt(&addr) {
            Ok(()) if !o.keep_dialing => break,
            Ok(()) => {}
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused) => {
                refused += 1
            }
            Err(e) => panic!("{}: {e}", o.path),
        }
        if o.attempts > 0 && n >= o.attempts {
            break;
        }
        std::thread::sleep(Duration::from_millis(o.interval_ms));
    }
    println!("sr-uds: {refused} refused");
}

fn usage(what: &str) -> ! {
    eprintln!("usage: sr-uds listen|connect|sendto PATH [options] ({what})");
    std::process::exit(2)
}
