//! scenerun: warm scene tests outside the device lock, then take the lock once.
//! `entry::run` is the entry point; the modules follow the phases docs/guarantees.md describes
//! (manifest → plan → warm → device → reports).

pub mod affected;
pub mod cache;
pub mod cli;
pub mod compiled;
pub mod device;
pub mod device_ids;
pub mod entry;
pub mod error;
pub mod exit;
pub mod explain;
pub mod failure;
pub mod fleet;
pub mod fsutil;
pub mod identity;
pub mod key;
pub mod layout;
pub mod manifest;
pub mod notice;
pub mod plan;
pub mod proc;
pub mod record;
pub mod report;
pub mod sampling;
#[cfg(test)]
mod schemas;
pub mod seal;
pub mod select;
pub mod stepid;
pub mod template;
pub mod ui;
pub mod units;
pub mod verdict;
pub mod warm;
pub mod warning;

mod commands;
