//! The connect loops the hot-path rows measure, run in this process: a client thread
//! and an accepting thread, both pinned to one CPU (see `cpu`), each timing its own
//! CPU (the kernel's nanosecond runtime of the thread, loopback softirqs included:
//! this kernel does not split out IRQ time). Three shapes: TCP closed with FIN or with
//! RST, and a Unix stream socket; and the datagram loops of `datagrams` (a delivered UDP
//! datagram, a drop that is no UDP refusal), one thread each.

use std::{
    io::Read as _,
    net::{TcpListener, TcpStream},
    os::{
        fd::AsRawFd,
        unix::net::{UnixListener, UnixStream},
        unix::thread::JoinHandleExt,
    },
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU32, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use anyhow::Context;

pub use super::cpu::Run;
use super::{
    cpu::{self, timed},
    datagrams,
};

/// A connect-and-close loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// The server closes first (FIN), the client reads the end of stream and closes:
    /// TIME_WAIT lands on the server side, so the client's ports never run out.
    TcpFin,
    /// The client closes with a reset (SO_LINGER 0).
    TcpRst,
    /// A Unix stream socket: connect, close.
    Uds,
    /// A UDP datagram sent over loopback to a bound socket that reads it: delivered.
    Udp,
    /// A frame of an EtherType no protocol handles, sent on loopback: the kernel drops
    /// it (`UNHANDLED_PROTO`), a drop that is no UDP refusal.
    Drop,
}

impl Workload {
    /// The successful-connect loops (the hot path).
    pub const ALL: [Workload; 3] = [Workload::TcpFin, Workload::TcpRst, Workload::Uds];
    /// The `kfree_skb` loops (issue #49), in the order they run: the drops first,
    /// whose null program on `kfree_skb` gives the statistics' cost the UDP loop (where
    /// no program runs) takes.
    pub const DATAGRAMS: [Workload; 2] = [Workload::Drop, Workload::Udp];

    pub fn label(self) -> &'static str {
        match self {
            Workload::TcpFin => "TCP connect + FIN close",
            Workload::TcpRst => "TCP connect + RST close",
            Workload::Uds => "UDS connect + close",
            Workload::Udp => "UDP send + receive (delivered)",
            Workload::Drop => "drop storm (frames of an unhandled EtherType on loopback)",
        }
    }

    /// What one operation of the loop is, in the rows' "per …".
    pub fn unit(self) -> &'static str {
        match self {
            Workload::TcpFin | Workload::TcpRst | Workload::Uds => "connection",
            Workload::Udp => "datagram",
            Workload::Drop => "drop",
        }
    }

    /// The hook whose other holders the bare runs watch for (another agent's program
    /// there would charge the bare runs what the row measures): the datagram loops'.
    pub fn watched_hook(self) -> Option<&'static str> {
        match self {
            Workload::Udp | Workload::Drop => Some("kfree_skb"),
            Workload::TcpFin | Workload::TcpRst | Workload::Uds => None,
        }
    }

    /// What the loop's targets are about, as their rows start.
    pub fn target(self) -> &'static str {
        match self {
            Workload::TcpFin | Workload::TcpRst | Workload::Uds => "successful connects",
            Workload::Udp => "delivered UDP datagrams",
            Workload::Drop => "unrelated drops",
        }
    }
}

/// Runs `n` operations of `w` on the loop CPU.
pub fn run(w: Workload, n: u32) -> anyhow::Result<Run> {
    match w {
        Workload::TcpFin | Workload::TcpRst => tcp(w == Workload::TcpRst, n),
        Workload::Uds => uds(n),
        Workload::Udp => datagrams::udp(n),
        Workload::Drop => datagrams::drops(n),
    }
}

fn tcp(reset: bool, n: u32) -> anyhow::Result<Run> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let target = listener.local_addr()?;
    deep_backlog(&listener);
    let server = serve(move || listener.accept().map(drop));
    let (run, server) = measured(n, server, move || {
        let mut s = TcpStream::connect(target)?;
        if reset {
            linger_zero(&s);
        } else {
            // Waits for the server's FIN: the client's close is then the passive one.
            let _ = s.read(&mut [0u8; 1])?;
        }
        Ok(())
    })?;
    // Wakes the accept loop so it sees `stop`.
    let _ = TcpStream::connect(target);
    server.join(run)
}

fn uds(n: u32) -> anyhow::Result<Run> {
    let path = SocketPath::new("loop")?;
    let listener = UnixListener::bind(&path.0).context("bind the UDS loop's socket")?;
    deep_backlog(&listener);
    let server = serve(move || listener.accept().map(drop));
    let target = path.0.clone();
    let (run, server) = measured(n, server, move || UnixStream::connect(&target).map(drop))?;
    let _ = UnixStream::connect(&path.0);
    server.join(run)
}

/// The accepting thread: pinned, accepts until told to stop, returns its CPU time.
struct Server {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Duration>,
}

fn serve(mut accept: impl FnMut() -> std::io::Result<()> + Send + 'static) -> Server {
    let on = cpu::loop_cpu();
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let thread = std::thread::spawn(move || {
        let _ = cpu::pin_current(on);
        let cpu0 = cpu::thread_cpu();
        while !stopped.load(Ordering::Relaxed) {
            let _ = accept();
        }
        cpu::thread_cpu() - cpu0
    });
    Server { stop, thread }
}

/// Runs `connect` `n` times on a pinned client thread; returns the run without the
/// server's CPU yet, and the server to stop once the caller has woken it.
fn measured(
    n: u32,
    server: Server,
    connect: impl FnMut() -> std::io::Result<()> + Send + 'static,
) -> anyhow::Result<(Run, Server)> {
    // Both threads' CPU at each chunk's end, read by the client from the server's clock.
    let server_clock = cpu::clock_of(server.thread.as_pthread_t());
    let run = timed(n, server_clock, connect);
    server.stop.store(true, Ordering::Relaxed);
    Ok((run?, server))
}

impl Server {
    /// Waits for the (woken) server and adds its CPU time to `run`.
    fn join(self, run: Run) -> anyhow::Result<Run> {
        let accept = self.thread.join().expect("the accepting thread");
        Ok(Run {
            cpu: run.cpu + accept,
            ..run
        })
    }
}

/// A deep accept queue: with std's 128, a briefly descheduled accept thread makes the
/// client wait (TCP: a second per dropped SYN), which would be measured.
fn deep_backlog(listener: &impl AsRawFd) {
    // SAFETY: listen(2) again on our listening socket only raises its backlog.
    unsafe { libc::listen(listener.as_raw_fd(), 4096) };
}

fn linger_zero(stream: &TcpStream) {
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

/// A socket path of this run, removed when dropped.
struct SocketPath(PathBuf);

impl SocketPath {
    fn new(what: &str) -> anyhow::Result<SocketPath> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "sr-bench-{}-{what}-{}.sock",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_file(&path);
        Ok(SocketPath(path))
    }
}

impl Drop for SocketPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
