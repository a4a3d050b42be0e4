//! scenerun: warm scene tests outside the device lock, then take the lock once.
//! `entry::run` is the entry point; the modules follow the phases docs/guarantees.md describes
//! (manifest → plan → warm → device → reports).

pub mod affected;
pub mod base;
pub mod cache;
pub mod cli;
pub mod compiled;
pub mod device;
pub mod entry;
pub mod explain;
pub mod fleet;
pub mod key;
pub mod manifest;
pub mod plan;
pub mod report;
#[cfg(test)]
mod schemas;
pub mod select;
pub mod warm;

mod commands;
