//! The base layer: small modules every other layer may use and that import nothing above
//! them (units, errors and exit codes, file reads and writes, templates, the terminal,
//! notices and the verdict words). `proc/`, the one place a child starts, is base too,
//! beside this folder (tests/layers.rs checks both).

pub mod device_ids;
pub mod error;
pub mod exit;
pub mod failure;
pub mod fsutil;
pub mod identity;
pub mod layout;
pub mod notice;
pub mod record;
pub mod sampling;
pub mod seal;
pub mod stepid;
pub mod template;
pub mod ui;
pub mod units;
pub mod verdict;
pub mod warning;
