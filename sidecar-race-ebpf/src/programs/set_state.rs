//! The socket fields of an `inet_sock_set_state` event that a listener needs, from
//! either hook: the tracefs tracepoint's record (offsets from its `format` file), or
//! the socket itself behind a BTF tracepoint (offsets from the kernel's BTF). Both give
//! the same values as the tracefs record: host-order ports, and IPv4 addresses in
//! their v4-mapped form.

use aya_ebpf::programs::TracePointContext;
use sidecar_race_ebpf::{
    abi::{AF_INET6, destination_tag, v4_mapped},
    layout::port_to_host,
};

use super::{ctx_load::load_u16, helpers::field, kernel_read::read, maps::config};

/// The socket's local end: family, address (v6 form), host-order port.
pub struct End {
    pub family: u16,
    pub addr: [u8; 16],
    pub port: u16,
}

pub trait SetStateSource {
    fn protocol(&self) -> Result<u16, u32>;
    /// The local end (where a listener listens).
    fn local(&self) -> End;
    /// Where a connect goes (`abi::destination_tag`); 0 when it cannot be read.
    fn destination(&self) -> u64;
}

impl SetStateSource for TracePointContext {
    #[inline(always)]
    fn protocol(&self) -> Result<u16, u32> {
        load_u16(self, config!(set_state.protocol))
    }

    #[inline(always)]
    fn local(&self) -> End {
        let l = config!(set_state);
        End {
            family: field(self, l.family).unwrap_or(0),
            addr: field(self, l.saddr_v6).unwrap_or([0; 16]),
            port: field(self, l.sport).unwrap_or(0),
        }
    }

    #[inline(always)]
    fn destination(&self) -> u64 {
        let l = config!(set_state);
        match (field(self, l.daddr_v6), field(self, l.dport)) {
            (Ok(addr), Ok(port)) => destination_tag(&addr, port),
            _ => 0,
        }
    }
}

/// Network to host order of a port read from the socket, for this target's byte order.
#[inline(always)]
fn ntohs(v: u16) -> u16 {
    port_to_host(v, cfg!(target_endian = "big"))
}

/// The `struct sock *` argument of the BTF tracepoint.
pub struct Sock(pub u64);

impl Sock {
    #[inline(always)]
    fn read<T>(&self, offset: u16) -> Result<T, u32> {
        read(self.0, offset).ok_or(0)
    }

    /// The v6-form address as the tracefs record stores it: the v6 field for an
    /// AF_INET6 socket, else the v4-mapped IPv4 address.
    #[inline(always)]
    fn addr(&self, family: u16, v6: u16, v4: u16) -> Result<[u8; 16], u32> {
        if family == AF_INET6 {
            self.read(v6)
        } else {
            Ok(v4_mapped(self.read(v4)?))
        }
    }
}

impl Sock {
    /// `skc_state`.
    #[inline(always)]
    pub fn state(&self) -> Result<u8, u32> {
        self.read(config!(sock.state))
    }

    /// The remote end: address (v6 form) and host-order port.
    #[inline(always)]
    pub fn remote(&self) -> Result<([u8; 16], u16), u32> {
        let f = config!(sock);
        let family = self.read::<u16>(f.family)?;
        Ok((
            self.addr(family, f.v6_daddr, f.daddr)?,
            ntohs(self.read(f.dport)?),
        ))
    }
}

impl SetStateSource for Sock {
    #[inline(always)]
    fn protocol(&self) -> Result<u16, u32> {
        self.read(config!(sock.protocol))
    }

    #[inline(always)]
    fn local(&self) -> End {
        let f = config!(sock);
        let family = self.read(f.family).unwrap_or(0);
        End {
            family,
            addr: self.addr(family, f.v6_saddr, f.saddr).unwrap_or([0; 16]),
            // `skc_num` is in host order already.
            port: self.read(f.sport).unwrap_or(0),
        }
    }

    #[inline(always)]
    fn destination(&self) -> u64 {
        match self.remote() {
            Ok((addr, port)) => destination_tag(&addr, port),
            Err(_) => 0,
        }
    }
}
