//! What a lane process is given (docs/lanes.md, what a lane process gets): the one place
//! its files are named (`{scenes}`, `{results}`, its log, and for one started before the
//! lock its go, status and claim files), its command with every placeholder filled, and
//! its environment. Shared by the processes the inner run starts and those `scenerun
//! device` starts before the lock, so the two cannot differ.

use std::path::PathBuf;

use crate::base::template::{Ph, Val};
use crate::device::Frozen;

/// The files of lane process `n` of `lane` in a run: its `{scenes}` and `{results}`,
/// its log, and for one started before the lock its go, status and claim files. The one
/// place they are named, for the processes the inner run starts and those `scenerun
/// device` starts before the lock alike.
#[derive(Debug, Clone)]
pub struct LaneFiles {
    pub scenes: PathBuf,
    pub results: PathBuf,
    pub log: PathBuf,
    /// Where its ids come, one JSON line (written by rename).
    pub go: PathBuf,
    /// Its leader's raw wait status, written by `scenerun device` once it has ended.
    pub status: PathBuf,
    /// Locked (flock) by whichever of `scenerun device` and the inner run owns it.
    pub claim: PathBuf,
}

impl LaneFiles {
    pub fn of(frozen: &Frozen, lane: &str, n: usize) -> LaneFiles {
        let dir = frozen.run_dir.join("lanes");
        let at = |what: &str| dir.join(format!("{lane}.{n}.{what}"));
        LaneFiles {
            scenes: at("scenes.jsonl"),
            results: at("results.jsonl"),
            log: frozen
                .report_dir
                .join("logs")
                .join("lanes")
                .join(format!("{lane}.{n}.log")),
            go: at("go"),
            status: at("status"),
            claim: at("claim"),
        }
    }
}

/// The lane process variant a batch needs (every scene of a batch has the same).
pub fn variant(frozen: &Frozen, batch: &[usize]) -> crate::manifest::Variant {
    let first = &frozen.scenes[batch[0]];
    first.device().run.variant().cloned().unwrap_or_default()
}

/// The `{scenes}` file of a batch: one JSON object per scene, in run order.
pub(super) fn scenes_text(frozen: &Frozen, batch: &[usize]) -> String {
    let mut text = String::new();
    for s in batch.iter().map(|&i| &frozen.scenes[i]) {
        let kernels =
            (!s.kernels.is_empty()).then(|| crate::device::kernels_dir(&frozen.run_dir, &s.name));
        text.push_str(
            &serde_json::json!({
                "scene": s.name,
                "args": s.device().args(),
                "kernels": kernels,
                "fixture": s.fixture.as_ref().map(|a| &a.out),
                "golden": s.golden.as_ref().map(|a| &a.out),
                "timeout_secs": s.device().timeout_secs,
                "outputs": crate::device::outputs::dir(&frozen.report_dir, &s.name),
            })
            .to_string(),
        );
        text.push('\n');
    }
    text
}

/// The command of a lane process for `batch` on `ids` (a comma list), every
/// placeholder filled, and its environment.
pub fn lane_command(
    frozen: &Frozen,
    lane: &str,
    batch: &[usize],
    ids: &str,
    files: &LaneFiles,
) -> (String, std::collections::BTreeMap<String, String>) {
    let cfg = &frozen.lanes[lane];
    // The batch shares one variant: its words come first, then each scene's.
    let variant = variant(frozen, batch);
    let scene_args = batch
        .iter()
        .flat_map(|&i| frozen.scenes[i].device().args().iter());
    let platform = &frozen.scenes[batch[0]].platform;
    let scenes = files.scenes.display().to_string();
    let results = files.results.display().to_string();
    let command = cfg.command(&variant, scene_args, platform, |ph| match ph {
        Ph::Devices => Val::One(ids.into()),
        Ph::Scenes => Val::One(scenes.as_str().into()),
        Ph::Results => Val::One(results.as_str().into()),
        _ => Val::Raw("".into()),
    });
    let mut env = cfg.env.clone();
    env.extend(variant.env.clone());
    env.insert("SCENERUN_DEVICES".into(), ids.to_string());
    env.insert("SCENERUN_SCENES".into(), scenes);
    env.insert("SCENERUN_RESULTS".into(), results);
    env.insert("SCENERUN_LANE".into(), lane.to_string());
    if let Some(stop) = cfg.stop {
        // The scenerun-pytest plugin routes this signal's stack dump past pytest's
        // capture, into the lane's log (docs/pytest.md).
        env.insert("SCENERUN_STOP_SIGNAL".into(), stop.signal_name());
    }
    (command, env)
}

/// Write a lane process's scenes file, clear an earlier results file, start its log
/// with its command; the log's length then (where its own output starts).
pub fn prepare_files(
    frozen: &Frozen,
    batch: &[usize],
    files: &LaneFiles,
    command: &str,
) -> std::io::Result<u64> {
    let dir = files.scenes.parent().expect("lane files have a dir");
    std::fs::create_dir_all(dir)?;
    std::fs::write(&files.scenes, scenes_text(frozen, batch))?;
    match std::fs::remove_file(&files.results) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    crate::base::fsutil::start_log(&frozen.report_dir, &files.log, &format!("$ {command}\n"))?;
    Ok(std::fs::metadata(&files.log).map(|m| m.len()).unwrap_or(0))
}
