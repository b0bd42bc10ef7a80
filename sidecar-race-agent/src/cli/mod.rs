//! Command-line interface (a public interface: documented in docs/reference.md). Every
//! flag can also be set through the environment variable named in its help. One module
//! per subcommand; `kernel.rs` holds the flags `trace` and `run` share, `values.rs` the
//! value parsers several use, `command.rs` the top-level command line and its parsing, `state.rs` where
//! `run` keeps what outlives it (and `unpin` removes it), `timeline.rs` the pod whose
//! incidents `timeline` prints.

mod command;
mod kernel;
mod lint;
mod report;
mod run;
mod state;
mod timeline;
mod trace;
mod values;

pub use self::{
    command::{Cli, Command, KUBECTL_PLUGIN, LogFormat, invoked_as_plugin, parse_args},
    kernel::{KernelArgs, PodSourceArgs},
    lint::{FailOn, FixMode, LintArgs},
    report::ReportArgs,
    run::{AuthMode, RunArgs},
    state::{PinMode, PlaceArgs, StateArgs},
    timeline::{TimelineArgs, TimelineFormat},
    trace::TraceArgs,
    values::clean_names,
};
