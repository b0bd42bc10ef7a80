//! The agent's HTTP server: health, metrics and the incidents API, with its auth.
//! `/healthz` (the reader is alive), `/readyz` (programs attached and the cgroup index
//! built), `/metrics`, `/api/v1/incidents` (with the others, on its own address, or
//! off: `--api-listen`).

mod answer_deadline;
pub mod auth;
mod endpoints;
mod health_slot;
mod listen;
mod peeking;
mod rendered;
mod replay;
pub mod server;
mod state;
pub mod tls;
mod write_deadline;

pub use self::{
    endpoints::{api_router, router},
    listen::{ApiListen, serve},
    server::Limits,
    state::HttpState,
};
