//! No manifest where scenerun looked (docs/cli.md): the error says where it searched,
//! where the search stopped and why, and how to name one; a directory as `--manifest`
//! is the `scenes.yaml` in it, or a clear error when it holds none. Exit 4 throughout.

use std::fs;

use super::*;

const ONE_SCENE: &str = "version: 1\nscenes:\n  - name: only\n    device: { run: \"true\" }\n";

/// Without `--manifest`, in a repository with no scenes.yaml: the error names the
/// directory it searched from, that the search went upwards and stopped at the
/// repository's root, and points at `--manifest` / `SCENERUN_MANIFEST`.
#[test]
fn no_manifest_found_says_where_it_searched_and_how_to_name_one() {
    let s = Suite::new();
    fs::create_dir(s.path(".git")).unwrap();
    fs::create_dir_all(s.path("sub/deeper")).unwrap();
    let cwd = s.path("sub/deeper");
    let o = scenerun().current_dir(&cwd).arg("list").output().unwrap();
    // Whole: the directory, the search upwards, the root it stopped at, the hint.
    crate::snapshots::assert_output("error_no_manifest_found", &o, s.dir());
}

/// `--manifest DIR` uses DIR/scenes.yaml; a directory without one, or a path that does
/// not exist, is a clear exit 4 (no "Is a directory (os error 21)").
#[test]
fn a_directory_as_manifest_means_the_scenes_yaml_in_it() {
    let s = Suite::new();
    s.manifest(ONE_SCENE);
    let o = scenerun()
        .arg("--manifest")
        .arg(s.dir())
        .arg("list")
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert!(stdout(&o).contains("only"), "{}", show(&o));

    fs::create_dir(s.path("empty")).unwrap();
    let o = scenerun()
        .arg("--manifest")
        .arg(s.path("empty"))
        .arg("plan")
        .output()
        .unwrap();
    // Whole, with no raw "Is a directory (os error 21)".
    crate::snapshots::assert_output("error_manifest_dir_without_one", &o, s.dir());

    let o = scenerun()
        .arg("--manifest")
        .arg(s.path("nope.yaml"))
        .arg("warm")
        .output()
        .unwrap();
    crate::snapshots::assert_output("error_manifest_path_missing", &o, s.dir());
}
