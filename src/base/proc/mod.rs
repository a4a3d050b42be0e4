//! Child processes: the one place scenerun starts one (docs/architecture.md, "proc/").
//! Each runs in its own process group, which one registry knows, so that a timeout,
//! SIGINT/SIGTERM or the death of scenerun itself (through the watchdog process) kills
//! whole groups, grandchildren included. Invariant: no step process outlives scenerun,
//! and every child but the watchdog (scenerun itself) is made by `env`'s builder.
//!
//! - `registry`: the live groups, their deadlines and stops, interrupts, the panic hook;
//! - `signals`: signals to a group, its liveness, `/proc/<pid>/stat`, the signal thread;
//! - `env`: the builder every child goes through, and the environment it is scrubbed of;
//! - `spawn`: run a step into its log, capture a command's output;
//! - `watchdog` and `adopt`: groups watched from outside, taken over, handed over;
//! - `output`: reading what a child appends to its output files;
//! - `piped`, `server`, `server_protocol`, `view`: the server's pipes, the Python server
//!   and the messages of its protocol, the read-only view.

mod adopt;
mod env;
pub mod output;
pub mod piped;
mod registry;
pub mod server;
pub mod server_protocol;
mod signals;
mod spawn;
pub mod view;
mod watchdog;

pub use adopt::{adopt, disown, finish_adopted, run_handed_over, watched_group};
pub use env::{
    child_env, hide_from_children, program, sh, strip_userinfo_for_children, without_userinfo,
};
pub use output::log_tail;
pub use registry::{
    grace, install_panic_hook, interrupt_all, interrupted, kill_all_now, set_grace, set_spawn_gate,
    stop, terminate, Ended, Finished, GRACE,
};
pub use signals::{group_alive, install_signal_thread, signal_group, stat, Stat, Stop};
pub use spawn::{capture, leader, run, run_observed, Captured, Spec, Stderr};
pub use watchdog::watchdog;
