//! One integration test binary (link time on two cores); topic modules below.

mod common;

mod device;
mod explain;
mod lock_standin;
mod manifest;
mod plan;
mod readme;
mod reliability;
mod remote;
mod trust;
mod warm;
mod workflows;
