//! A newcomer's first day (issue 27): each friction met by trying scenerun as a new user
//! would, pinned by a test that ran the same steps and failed before the fix.

mod cause;
mod interrupted;
mod list;
mod manifest_missing;
mod narrow;
mod not_warm;
mod readme_lane;
mod report_paths;
mod startup;
mod text;
mod warm_output;

use std::path::PathBuf;

use super::common::*;

/// `.ci/venv/bin`, with pytest, pytest-reportlog and the scenerun pytest plugin (as
/// `.ci/deps.sh` installs them); a test that needs them fails without them.
fn venv_bin() -> PathBuf {
    let bin = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/venv/bin"));
    let has = |module: &str| {
        std::process::Command::new(bin.join("python"))
            .args(["-c", &format!("import {module}")])
            .status()
            .is_ok_and(|s| s.success())
    };
    assert!(
        has("pytest_reportlog") && has("scenerun_pytest"),
        "needs .ci/venv with pytest-reportlog and the scenerun plugin: run `bash .ci/deps.sh`"
    );
    bin
}

/// PATH with `.ci/venv/bin` first, so a lane's `python` is the venv's.
fn venv_path() -> String {
    format!(
        "{}:{}",
        venv_bin().display(),
        std::env::var("PATH").unwrap_or_default()
    )
}
