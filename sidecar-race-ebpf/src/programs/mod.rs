//! One file per kernel concern; the shared maps and configuration (`maps`), the
//! helpers every program calls (`helpers`) and the budget ledgers (`ledgers`) are
//! leaves the programs import.

mod budget;
mod cgroups;
mod charge;
mod connect;
mod connecting;
mod ctx_load;
mod helpers;
mod ledgers;
mod listen;
mod maps;
mod process;
mod reset;
mod set_state;
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
