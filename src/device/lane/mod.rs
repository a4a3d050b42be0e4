//! The lane (docs/lanes.md): one process running a batch of scenes on one set of ids.
//! `process` runs it (`files` names what it is given, `results_tail` reads its results
//! file, `restart` decides when it asks for a fresh process); `protocol` reads one line
//! of its results and `batch` attributes the lines to the scenes of its batch, as pure
//! code. `prestart` starts processes before the lock (forked from `fork_server` when the
//! manifest has one), `adopt` takes them over inside it.
//! Invariant: every scene handed to a lane process gets exactly one verdict per process,
//! or is handed back to be run again.

pub mod adopt;
pub mod batch;
pub mod files;
pub mod fork_server;
pub mod prestart;
pub mod process;
pub mod protocol;
pub mod restart;
mod results_tail;
