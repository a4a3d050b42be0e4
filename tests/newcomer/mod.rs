//! A newcomer's first day (issue 27): each friction met by trying scenerun as a new user
//! would, pinned by a test that ran the same steps and failed before the fix.

mod cause;
mod list;
mod manifest_missing;
mod not_warm;
mod readme_lane;
mod report_paths;
mod text;
mod warm_output;

use super::common::*;
