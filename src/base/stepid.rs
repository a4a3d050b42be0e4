//! A warm step's identity: (kind, scene, name). Stable across content changes, so
//! history, the key-input records, logs, the warm record and every printed line name a
//! step the same way. Rendered here and nowhere else.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What a step produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Kernel,
    Fixture,
    Golden,
    /// A top-level `prepare:` step (docs/manifest.md): one per checkout, every scene's.
    Prepare,
    /// A scene's `test:`: a CPU-only test run in warm; its artifact is the verdict.
    Test,
    /// What a compile a test started in its own body made (`compile_cache:`, see
    /// `compiled`): never a step of a plan, only an entry of the cache.
    Compiled,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::Kernel,
        Kind::Fixture,
        Kind::Golden,
        Kind::Prepare,
        Kind::Test,
        Kind::Compiled,
    ];

    /// Why a plan's step is never of kind `Compiled`.
    pub const NOT_A_STEP: &'static str = "a compiled entry is never a plan's step";

    pub fn name(self) -> &'static str {
        match self {
            Kind::Kernel => "kernel",
            Kind::Fixture => "fixture",
            Kind::Golden => "golden",
            Kind::Prepare => "prepare",
            Kind::Test => "test",
            Kind::Compiled => "compiled",
        }
    }

    /// The verb printed before a step of this kind: `compile`, `fixture`, `golden`,
    /// `prepare`, `test`.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Kernel => "compile",
            Kind::Fixture => "fixture",
            Kind::Golden => "golden",
            Kind::Prepare => "prepare",
            Kind::Test => "test",
            Kind::Compiled => "compiled",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StepId {
    pub kind: Kind,
    pub scene: String,
    /// The kernel's name, or `fixture` / `golden`.
    pub name: String,
}

impl StepId {
    pub fn new(kind: Kind, scene: &str, name: &str) -> StepId {
        StepId {
            kind,
            scene: scene.to_string(),
            name: name.to_string(),
        }
    }

    /// The key under which history and key-input records keep this step
    /// (`kernel/scene/name`; also the `built_by` of an entry).
    pub fn record_key(&self) -> String {
        // Built by hand: a plan asks this of every step (history estimates), and `format!`
        // cost several times the copy.
        let kind = self.kind.name();
        let mut key = String::with_capacity(kind.len() + self.scene.len() + self.name.len() + 2);
        for part in [kind, "/", &self.scene, "/", &self.name] {
            key.push_str(part);
        }
        key
    }

    /// The verb printed before the step: `compile`, `fixture`, `golden`, `prepare`.
    pub fn label(&self) -> &'static str {
        self.kind.label()
    }

    /// The step's log: `<job dir>/logs/<scene>/compile-<kernel>.log` or `<kind>.log`.
    pub fn log_path(&self, job_dir: &Path) -> PathBuf {
        let (prefix, stem) = self.log_file();
        let file = format!("{prefix}{stem}.log");
        job_dir.join("logs").join(&self.scene).join(file)
    }

    /// The log file's name, `<prefix><stem>.log`: `compile-<kernel>`, `prepare-<name>`
    /// or `<kind>`.
    fn log_file(&self) -> (&'static str, &str) {
        match self.kind {
            Kind::Kernel => ("compile-", &self.name),
            Kind::Prepare => ("prepare-", &self.name),
            k => ("", k.name()),
        }
    }

    /// Whether `shown` is `log_path` displayed, for a job whose `logs` directory displays
    /// as `logs`: compared in place (a no-op warm asks it of every step's record).
    pub fn is_log_path(&self, logs: &str, shown: &str) -> bool {
        let Some(file) = shown
            .strip_prefix(logs)
            .and_then(|r| r.strip_prefix('/'))
            .and_then(|r| r.strip_prefix(self.scene.as_str()))
            .and_then(|r| r.strip_prefix('/'))
        else {
            return false;
        };
        let (prefix, stem) = self.log_file();
        file.strip_prefix(prefix)
            .and_then(|r| r.strip_suffix(".log"))
            == Some(stem)
    }

    /// `label scene/name`, as every line about a step starts.
    pub fn labelled(&self) -> String {
        format!("{} {self}", self.label())
    }
}

/// `scene/name`.
impl fmt::Display for StepId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.scene, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_each_form_once() {
        let k = StepId::new(Kind::Kernel, "vadd", "add");
        assert_eq!(k.to_string(), "vadd/add");
        assert_eq!(k.record_key(), "kernel/vadd/add");
        assert_eq!(k.labelled(), "compile vadd/add");
        assert_eq!(
            k.log_path(Path::new("/j")),
            PathBuf::from("/j/logs/vadd/compile-add.log")
        );
        let f = StepId::new(Kind::Fixture, "vadd", "fixture");
        assert_eq!(f.labelled(), "fixture vadd/fixture");
        assert_eq!(
            f.log_path(Path::new("/j")),
            PathBuf::from("/j/logs/vadd/fixture.log")
        );
    }

    #[test]
    fn a_log_path_is_recognised_in_place_and_nothing_else_is() {
        let job = Path::new("/w/build/scenerun");
        let logs = job.join("logs").display().to_string();
        let ids = [
            StepId::new(Kind::Kernel, "vadd", "add"),
            StepId::new(Kind::Kernel, "vadd", "mul"),
            StepId::new(Kind::Kernel, "vsub", "add"),
            StepId::new(Kind::Fixture, "vadd", "fixture"),
            StepId::new(Kind::Golden, "vadd", "golden"),
        ];
        for a in &ids {
            let shown = a.log_path(job).display().to_string();
            for b in &ids {
                assert_eq!(b.is_log_path(&logs, &shown), a == b, "{a:?} {b:?}");
            }
            assert!(!a.is_log_path("/elsewhere/logs", &shown));
            assert!(!a.is_log_path(&logs, &format!("{shown}x")));
        }
    }
}
