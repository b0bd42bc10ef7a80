//! The loops of the `kfree_skb` rows (issue #49): the agent's program on `skb:kfree_skb`
//! sees every skb the node drops, so these measure what it adds to a UDP datagram that
//! is delivered (nothing should run) and to a drop that is no UDP refusal (the program
//! should leave at its first compare, the drop's reason). One thread each, pinned to the
//! loop CPU: loopback delivers or drops a packet in the softirq its sender's own send
//! runs, in the sender's task, so that thread's CPU holds the packet's whole path.

use std::{
    net::UdpSocket,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    time::Duration,
};

use anyhow::{Context, bail};

use super::cpu::{Run, timed};

/// A statsd line's size.
const PAYLOAD: [u8; 32] = [b'x'; 32];

/// `n` datagrams from a connected UDP socket to a bound one on 127.0.0.1, each read by
/// the receiving socket before the next is sent (in the same thread: delivery is done
/// when the send returns, so the receive queue never fills and nothing is dropped).
pub fn udp(n: u32) -> anyhow::Result<Run> {
    let rx = UdpSocket::bind("127.0.0.1:0").context("bind the UDP loop's receiver")?;
    // A datagram the kernel's ksoftirqd delivers instead arrives a little later; one
    // lost would stop the loop here rather than hang it.
    rx.set_read_timeout(Some(Duration::from_secs(5)))?;
    let tx = UdpSocket::bind("127.0.0.1:0")?;
    tx.connect(rx.local_addr()?)?;
    let mut buf = [0u8; 64];
    timed(n, None, move || {
        tx.send(&PAYLOAD)?;
        let got = rx.recv(&mut buf)?;
        if got != PAYLOAD.len() {
            return Err(std::io::Error::other(format!("received {got} bytes")));
        }
        Ok(())
    })
}

/// `n` frames of the IEEE's local experimental EtherType (0x88b5), which no protocol
/// handler takes, sent on the loopback device by a packet socket: each is dropped in
/// `__netif_receive_skb_core` with the reason `UNHANDLED_PROTO` (`kfree_skb` fires, its
/// reason is not `NO_SOCKET`), cheap and the same every time. No UDP, no TCP, no socket
/// lookup: none of the agent's other hooks runs.
pub fn drops(n: u32) -> anyhow::Result<Run> {
    let socket = PacketSocket::on_loopback()?;
    timed(n, None, move || socket.send(&FRAME))
}

/// Ethernet header (destination and source 00:00:00:00:00:00, loopback's own address,
/// so the frame is for this host) and the EtherType, padded to the 60-byte minimum.
const FRAME: [u8; 60] = {
    let mut f = [0u8; 60];
    f[12] = 0x88;
    f[13] = 0xb5;
    f
};

/// The loopback device's index in every network namespace.
const LOOPBACK_IFINDEX: i32 = 1;

/// An `AF_PACKET` raw socket bound to loopback with protocol 0: it sends, and receives
/// nothing (no protocol hook is registered for it).
struct PacketSocket(OwnedFd);

impl PacketSocket {
    fn on_loopback() -> anyhow::Result<PacketSocket> {
        // SAFETY: socket(2) with constant arguments; the fd is checked and then owned.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            bail!(
                "a packet socket for the drop loop (needs CAP_NET_RAW): {}",
                std::io::Error::last_os_error()
            );
        }
        // SAFETY: a new fd the kernel just gave us.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: a zeroed sockaddr_ll is valid; the fields set are plain integers.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_ifindex = LOOPBACK_IFINDEX;
        // SAFETY: bind(2) on our socket with a correctly sized address.
        let bound = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if bound != 0 {
            bail!(
                "bind the drop loop's packet socket to loopback: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(PacketSocket(fd))
    }

    fn send(&self, frame: &[u8]) -> std::io::Result<()> {
        // SAFETY: send(2) on our socket from a buffer of the length we pass.
        let sent = unsafe { libc::send(self.0.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        if sent < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}
