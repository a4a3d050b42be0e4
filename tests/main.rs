//! One integration test binary (link time on two cores); topic modules below.

mod common;
mod runner;

mod action;
mod device;
mod docs;
mod explain;
mod fleet;
mod generated;
mod lanes;
mod layers;
mod lock_standin;
mod manifest;
mod newcomer;
mod plan;
mod pytest_suite;
mod readme;
mod reliability;
mod remote;
mod reports;
mod schemas;
mod simpler;
mod simpler_shape;
mod snapshots;
mod trust;
mod verdicts;
mod warm;
mod wheel;
mod workflows;
