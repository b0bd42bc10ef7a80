//! Fills one of the kernel programs' LRU tables, as a pod could:
//!
//! - `connecting N PORT CLIENT_CGROUP`: N connects left in SYN_SENT (their SYNs
//!   dropped by a listener whose accept queue is full), then refused once it closes;
//!   the listener is made in the cgroup this starts in, the connects in
//!   CLIENT_CGROUP (another container's: a refusal within one container is its own);
//! - `listening N PORT`: N listeners on PORT.., held, then closed;
//! - `syn-scan N PORT`: N SYNs from raw sockets to a closed PORT, from N client
//!   ports: the local stack refuses each, and no socket ever takes its reset;
//! - `cgroups PORT refuse|listen DIR...`: moves itself into each cgroup DIR in turn
//!   and there makes one refusal (a connect to the closed PORT) or one listener.
//!
//! Prints what it did; exits non-zero when a step fails.

use std::{
    io,
    mem::size_of,
    net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream},
    thread::sleep,
    time::Duration,
};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize| -> u32 {
        args.get(i)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| usage())
    };
    let result = match args.first().map(String::as_str) {
        Some("connecting") => match args.get(3) {
            Some(client_cgroup) => connecting(num(1), num(2) as u16, client_cgroup),
            None => usage(),
        },
        Some("listening") => listening(num(1), num(2) as u16),
        Some("syn-scan") => syn_scan(num(1), num(2) as u16),
        Some("cgroups") => match args.get(2).map(String::as_str) {
            Some(what @ ("refuse" | "listen")) => cgroups(num(1) as u16, what, &args[3..]),
            _ => usage(),
        },
        _ => usage(),
    };
    if let Err(e) = result {
        eprintln!("sr-fill: {e}");
        std::process::exit(1);
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: sr-fill connecting N PORT CLIENT_CGROUP | listening N PORT | syn-scan N PORT | cgroups PORT refuse|listen DIR..."
    );
    std::process::exit(2)
}

fn check(rc: libc::c_int, what: &str) -> io::Result<libc::c_int> {
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(rc)
}

fn sockaddr(port: u16) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(Ipv4Addr::LOCALHOST).to_be(),
        },
        sin_zero: [0; 8],
    }
}

fn connecting(n: u32, port: u16, client_cgroup: &str) -> io::Result<()> {
    // SAFETY: plain socket syscalls on descriptors this function owns.
    unsafe {
        let listener = check(libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0), "socket")?;
        let one: libc::c_int = 1;
        libc::setsockopt(
            listener,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&raw const one).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        );
        let addr = sockaddr(port);
        let len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
        check(libc::bind(listener, (&raw const addr).cast(), len), "bind")?;
        // A backlog of 0: the first connection fills the accept queue, nothing accepts,
        // and the SYNs after it are dropped: those sockets stay in SYN_SENT.
        check(libc::listen(listener, 0), "listen")?;
        join_cgroup(client_cgroup)?;
        let mut fds = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let fd = check(
                libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0),
                "socket",
            )?;
            let rc = libc::connect(fd, (&raw const addr).cast(), len);
            if rc < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINPROGRESS) {
                return Err(io::Error::last_os_error());
            }
            fds.push(fd);
        }
        sleep(Duration::from_millis(300));
        // The SYNs resent after this (the first after ~1 s) find no listener.
        libc::close(listener);
        sleep(Duration::from_secs(5));
        let refused = fds
            .iter()
            .filter(|&&fd| {
                let mut err: libc::c_int = 0;
                let mut l = size_of::<libc::c_int>() as libc::socklen_t;
                libc::getsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_ERROR,
                    (&raw mut err).cast(),
                    &mut l,
                );
                err == libc::ECONNREFUSED
            })
            .count();
        for fd in fds {
            libc::close(fd);
        }
        println!("sr-fill: {refused} of {n} connects refused");
        // The one or two the listener's queue took were reset, not refused.
        if refused + 2 < n as usize {
            return Err(io::Error::other(
                "fewer connects refused than left in SYN_SENT",
            ));
        }
    }
    Ok(())
}

fn listening(n: u32, port: u16) -> io::Result<()> {
    let mut held = Vec::with_capacity(n as usize);
    for i in 0..n {
        held.push(TcpListener::bind((Ipv4Addr::LOCALHOST, port + i as u16))?);
        // Paced, so agents elsewhere on the node drain their control ring meanwhile.
        sleep(Duration::from_millis(2));
    }
    sleep(Duration::from_millis(500));
    for l in held {
        drop(l);
        sleep(Duration::from_millis(2));
    }
    println!("sr-fill: {n} listeners opened and closed");
    Ok(())
}

fn syn_scan(n: u32, port: u16) -> io::Result<()> {
    // SAFETY: a raw socket this function owns; the buffer outlives each send.
    unsafe {
        let fd = check(
            libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_TCP),
            "raw socket",
        )?;
        let to = sockaddr(port);
        for i in 0..n {
            let segment = syn(40_000 + i as u16, port);
            check(
                libc::sendto(
                    fd,
                    segment.as_ptr().cast(),
                    segment.len(),
                    0,
                    (&raw const to).cast(),
                    size_of::<libc::sockaddr_in>() as libc::socklen_t,
                ) as libc::c_int,
                "sendto",
            )?;
        }
        libc::close(fd);
    }
    println!("sr-fill: {n} SYNs sent to 127.0.0.1:{port}");
    Ok(())
}

/// A TCP SYN from 127.0.0.1:`from` to 127.0.0.1:`to`, checksummed.
fn syn(from: u16, to: u16) -> [u8; 20] {
    let mut s = [0u8; 20];
    s[0..2].copy_from_slice(&from.to_be_bytes());
    s[2..4].copy_from_slice(&to.to_be_bytes());
    s[4..8].copy_from_slice(&1u32.to_be_bytes()); // sequence number
    s[12] = 5 << 4; // header length: 5 words
    s[13] = 0x02; // SYN
    s[14..16].copy_from_slice(&64_240u16.to_be_bytes()); // window
    let lo = Ipv4Addr::LOCALHOST.octets();
    let mut pseudo = Vec::with_capacity(32);
    pseudo.extend_from_slice(&lo);
    pseudo.extend_from_slice(&lo);
    pseudo.extend_from_slice(&[0, libc::IPPROTO_TCP as u8, 0, 20]);
    pseudo.extend_from_slice(&s);
    let mut sum: u32 = pseudo
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    s[16..18].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    s
}

fn cgroups(port: u16, what: &str, dirs: &[String]) -> io::Result<()> {
    for (i, dir) in dirs.iter().enumerate() {
        join_cgroup(dir)?;
        if what == "refuse" {
            let to = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
            match TcpStream::connect(to) {
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {}
                other => return Err(io::Error::other(format!("{to}: {other:?}, not refused"))),
            }
        } else {
            drop(TcpListener::bind((Ipv4Addr::LOCALHOST, port + i as u16))?);
        }
        sleep(Duration::from_millis(2));
    }
    println!(
        "sr-fill: {} from {} cgroups",
        if what == "refuse" {
            "one refusal"
        } else {
            "one listener"
        },
        dirs.len()
    );
    Ok(())
}

/// Moves this process into cgroup `dir`: a socket belongs to the cgroup it is made in.
fn join_cgroup(dir: &str) -> io::Result<()> {
    // "0": the writing process.
    std::fs::write(format!("{dir}/cgroup.procs"), "0")
}
