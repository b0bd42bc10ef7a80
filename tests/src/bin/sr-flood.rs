//! A noisy neighbour: refuses as fast as it can, in one thread across a range of
//! closed local ports and in another in a tight loop on one closed port, for a given
//! time. Writes how many connects were refused (ECONNREFUSED) to `--out`. With
//! `--listen-churn` it instead listens on the hot port and closes, in a tight loop,
//! and writes how many listeners it opened. With `--start-at-unix-ms` it waits for
//! that wall-clock instant and stops `--seconds` after it, so many processes spawned
//! one by one flood over the same window.

use std::{
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    sync::atomic::{AtomicU64, Ordering::Relaxed},
    time::{Duration, Instant},
};

static REFUSED: AtomicU64 = AtomicU64::new(0);
static OTHER_ERRORS: AtomicU64 = AtomicU64::new(0);

fn main() {
    let (mut first, mut last, mut hot) = (16_000u16, 25_999u16, 9_999u16);
    let (mut seconds, mut out) = (3.0f64, None::<String>);
    let mut churn = false;
    let mut start_at = None::<u64>;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--listen-churn" {
            churn = true;
            continue;
        }
        let v = args.next().unwrap_or_else(|| usage(&a));
        match a.as_str() {
            "--ports" => {
                let (a, b) = v.split_once('-').unwrap_or_else(|| usage("--ports"));
                first = a.parse().unwrap_or_else(|_| usage("--ports"));
                last = b.parse().unwrap_or_else(|_| usage("--ports"));
            }
            "--hot" => hot = v.parse().unwrap_or_else(|_| usage("--hot")),
            "--seconds" => seconds = v.parse().unwrap_or_else(|_| usage("--seconds")),
            "--out" => out = Some(v),
            "--start-at-unix-ms" => {
                start_at = Some(v.parse().unwrap_or_else(|_| usage("--start-at-unix-ms")))
            }
            _ => usage(&a),
        }
    }
    let until = wait_for_start(start_at) + Duration::from_secs_f64(seconds);
    if churn {
        let mut opened = 0u64;
        while Instant::now() < until {
            if TcpListener::bind((Ipv4Addr::LOCALHOST, hot)).is_ok() {
                opened += 1;
            }
        }
        println!("sr-flood: {opened} listeners opened and closed");
        if let Some(out) = out {
            std::fs::write(out, opened.to_string()).expect("write --out");
        }
        return;
    }
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut port = first;
            while Instant::now() < until {
                dial(port);
                port = if port >= last { first } else { port + 1 };
            }
        });
        s.spawn(|| {
            while Instant::now() < until {
                dial(hot);
            }
        });
    });
    let refused = REFUSED.load(Relaxed);
    println!(
        "sr-flood: {refused} refused, {} other errors",
        OTHER_ERRORS.load(Relaxed)
    );
    if let Some(out) = out {
        std::fs::write(out, refused.to_string()).expect("write --out");
    }
}

/// Sleeps until `start_at` (ms since the Unix epoch) if given; the flood's start,
/// in the past when this process started late (it then stops with the others).
fn wait_for_start(start_at: Option<u64>) -> Instant {
    let Some(ms) = start_at else {
        return Instant::now();
    };
    let at = std::time::UNIX_EPOCH + Duration::from_millis(ms);
    match at.duration_since(std::time::SystemTime::now()) {
        Ok(ahead) => {
            std::thread::sleep(ahead);
            Instant::now()
        }
        Err(late) => Instant::now() - late.duration(),
    }
}

fn dial(port: u16) {
    let to = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    // Long: 100 flooding threads on 2 CPUs can keep this one off a CPU for over a
    // second, and a refusal the kernel saw must not be counted here as a time-out.
    match TcpStream::connect_timeout(&to, Duration::from_secs(30)) {
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            REFUSED.fetch_add(1, Relaxed);
        }
        other => {
            // Rare, and what it was tells why the kernel's count differs.
            eprintln!("sr-flood: port {port}: {:?}", other.map(|_| "connected"));
            OTHER_ERRORS.fetch_add(1, Relaxed);
        }
    }
}

fn usage(at: &str) -> ! {
    eprintln!(
        "sr-flood: bad argument {at}\nusage: sr-flood [--ports FIRST-LAST] [--hot PORT] [--seconds S] [--out PATH] [--listen-churn] [--start-at-unix-ms MS]"
    );
    std::process::exit(2)
}
