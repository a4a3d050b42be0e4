//! The base layer: small modules every other layer may use and that import nothing above
//! them (units, errors and exit codes, file reads and writes, templates, the terminal,
//! notices and the verdict words), and `proc/`, the one place a child starts (it uses
//! the others; tests/layers.rs checks that nothing of the base imports a layer above).

pub mod device_ids;
pub mod error;
pub mod exit;
pub mod failure;
pub mod fsutil;
pub mod identity;
pub mod layout;
pub mod notice;
pub mod proc;
pub mod record;
pub mod sampling;
pub mod seal;
pub mod stepid;
pub mod template;
pub mod ui;
pub mod units;
pub mod verdict;
pub mod warning;
