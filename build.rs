//! One build-time switch: the tests that run simpler's real suite (docs/adopting.md) are
//! compiled as ignored, with the reason, unless `SCENERUN_SIMPLER_TREE` names a tree when
//! the tests are built; then they run like any test. Nothing else depends on it.

fn main() {
    println!("cargo::rerun-if-env-changed=SCENERUN_SIMPLER_TREE");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rustc-check-cfg=cfg(simpler_tree)");
    if std::env::var_os("SCENERUN_SIMPLER_TREE").is_some_and(|v| !v.is_empty()) {
        println!("cargo::rustc-cfg=simpler_tree");
    }
}
