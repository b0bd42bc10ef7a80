//! One file per kernel concern; the shared maps and configuration (`maps`), the
//! helpers every program calls (`helpers`), kernel reads (`kernel_read`), the atomics
//! (`atomics`) and the budget ledgers (`ledgers`) are leaves the programs import.

/// A program that charges a budget, in both forms: `$name` updates it by
/// compare-and-exchange (5.12+), `$plain` plainly for older kernels, whose verifiers
/// refuse that instruction even where it is never reached. The agent loads `$plain`
/// where the kernel has no compare-and-exchange (`kernel::variant`). `$body` is
/// `fn<const CMPXCHG: bool>(ctx: &$ty) -> u32`.
macro_rules! budgeted {
    ($(#[$attr:meta])* $name:ident / $plain:ident ($ty:ty) => $body:ident) => {
        $(#[$attr])*
        pub fn $name(ctx: $ty) -> u32 {
            $body::<true>(&ctx)
        }
        $(#[$attr])*
        pub fn $plain(ctx: $ty) -> u32 {
            $body::<false>(&ctx)
        }
    };
}

mod atomics;
mod budget;
mod cgroups;
mod charge;
mod connect;
mod connecting;
mod ctx_load;
mod helpers;
mod kernel_read;
mod ledgers;
mod listen;
mod maps;
mod process;
mod reset;
mod set_state;
mod socket_owner;
mod tcp_listen;
mod udp_refused;
mod unix_connect;
mod unix_kprobes;
mod unix_listen;
mod unix_sock;
mod unix_syscall_listen;
mod unix_syscalls;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
