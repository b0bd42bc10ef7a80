//! A stand-in application: dials its sidecar at once and retries, as apps do.
//! Prints how many attempts were refused and when it got through. With
//! `--dial-thread NAME` it dials from a thread of that name, as a JVM's or a thread
//! pool's worker does, while the process keeps the name it was run by.

use std::{
    net::{SocketAddr, TcpStream},
    time::{Duration, Instant},
};

fn main() {
    // Several --connect: each attempt tries them in order until one accepts, as a client
    // of `localhost` tries ::1, then 127.0.0.1.
    let mut targets: Vec<SocketAddr> = Vec::new();
    let mut interval_ms = 100u64;
    let mut attempts = 0u64; // 0: until connected
    let mut keep_dialing = false;
    let mut reset_on_close = false;
    let mut dial_thread: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut v = || args.next().unwrap_or_else(|| usage(&a));
        match a.as_str() {
            "--connect" => targets.push(v().parse().unwrap_or_else(|_| usage("--connect"))),
            "--interval-ms" => interval_ms = v().parse().unwrap_or_else(|_| usage("--interval-ms")),
            "--attempts" => attempts = v().parse().unwrap_or_else(|_| usage("--attempts")),
            // Dial every attempt even after success (a drain: the app keeps working).
            "--keep-dialing" => keep_dialing = true,
            // Close with a reset (SO_LINGER 0): no TIME_WAIT piles up in long loops.
            "--reset-on-close" => reset_on_close = true,
            "--dial-thread" => dial_thread = Some(v()),
            _ => usage(&a),
        }
    }
    if targets.is_empty() {
        targets.push("127.0.0.1:15001".parse().unwrap());
    }
    let run = move || {
        dial(
            &targets,
            interval_ms,
            attempts,
            keep_dialing,
            reset_on_close,
        )
    };
    match dial_thread {
        None => run(),
        Some(name) => std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                // The kernel names the thread so (its own `comm`), not the process.
                let comm = std::fs::read_to_string("/proc/thread-self/comm").unwrap_or_default();
                assert_eq!(comm.trim_end(), name, "thread name as the kernel has it");
                run()
            })
            .expect("start the dialing thread")
            .join()
            .expect("the dialing thread"),
    }
}

fn dial(
    targets: &[SocketAddr],
    interval_ms: u64,
    attempts: u64,
    keep_dialing: bool,
    reset_on_close: bool,
) {
    let target = targets[0];
    let start = Instant::now();
    let (mut refused, mut connected, mut n) = (0u64, 0u64, 0u64);
    loop {
        n += 1;
        for target in targets {
            match TcpStream::connect_timeout(target, Duration::from_secs(2)) {
                Ok(stream) => {
                    if reset_on_close {
                        linger_zero(&stream);
                    }
                    connected += 1;
                    if !keep_dialing {
                        println!(
                            "sr-app: connected to {target} after {refused} refused attempts, {} ms",
                            start.elapsed().as_millis()
                        );
                        return;
                    }
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => refused += 1,
                Err(e) => eprintln!("sr-app: {target}: {e}"),
            }
        }
        if attempts != 0 && n >= attempts {
            break;
        }
        if interval_ms > 0 {
            std::thread::sleep(Duration::from_millis(interval_ms));
        }
    }
    println!("sr-app: {n} attempts to {target}: {refused} refused, {connected} connected");
}

fn linger_zero(stream: &TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid socket fd and a correctly sized option value.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

fn usage(at: &str) -> ! {
    eprintln!(
        "sr-app: bad argument {at}\nusage: sr-app [--connect ADDR:PORT]... [--interval-ms N] [--attempts N] [--keep-dialing] [--reset-on-close] [--dial-thread NAME]"
    );
    std::process::exit(2)
}
