//! A stand-in sidecar proxy: listens after a delay, accepts and closes connections,
//! optionally stops listening after a while (drain) and exits on SIGTERM.

use std::{net::TcpListener, time::Duration};

fn main() {
    let mut listen = "127.0.0.1:15001".to_string();
    let mut delay_ms = 0u64;
    let mut close_after_ms: Option<u64> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut v = || args.next().unwrap_or_else(|| usage(&a));
        match a.as_str() {
            "--listen" => listen = v(),
            "--delay-ms" => delay_ms = v().parse().unwrap_or_else(|_| usage("--delay-ms")),
            "--close-after-ms" => {
                close_after_ms = Some(v().parse().unwrap_or_else(|_| usage("--close-after-ms")))
            }
            _ => usage(&a),
        }
    }
    std::thread::sleep(Duration::from_millis(delay_ms));
    let listener = TcpListener::bind(&listen).unwrap_or_else(|e| {
        eprintln!("sr-proxy: cannot listen on {listen}: {e}");
        std::process::exit(1)
    });
    println!("sr-proxy: listening on {listen}");
    // Accept and hang up; the listener lives until the process exits.
    let accept = std::thread::spawn(move || listener.incoming().for_each(drop));
    match close_after_ms {
        Some(ms) => {
            std::thread::sleep(Duration::from_millis(ms));
            println!("sr-proxy: closing the listener");
            std::process::exit(0);
        }
        None => {
            let _ = accept.join();
        }
    }
}

fn usage(at: &str) -> ! {
    eprintln!(
        "sr-proxy: bad argument {at}\nusage: sr-proxy [--listen ADDR:PORT] [--delay-ms N] [--close-after-ms N]"
    );
    std::process::exit(2)
}
