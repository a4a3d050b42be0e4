//! scenerun: warm scene tests outside the device lock, then take the lock once.
//! `run` is the entry point; the modules follow the phases of DESIGN.md §2.

pub mod affected;
pub mod cache;
pub mod cli;
pub mod device;
pub mod exit;
pub mod explain;
pub mod fsutil;
pub mod key;
pub mod manifest;
pub mod plan;
pub mod proc;
pub mod report;
pub mod select;
pub mod stepid;
pub mod template;
pub mod warm;

mod commands;

use cli::Cli;
use exit::Exit;

/// Run one command line to completion and say how the process should exit.
pub fn run(cli: Cli) -> Exit {
    let ui = report::term::Ui::new(&cli);
    match commands::dispatch(cli, &ui) {
        Ok(exit) => exit,
        Err(err) => {
            ui.error(&exit::render(&err));
            exit::exit_of(&err)
        }
    }
}
