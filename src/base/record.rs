//! The warm record, `build/scenerun/warm.json`: per step its key, status, duration, log
//! and, for a failure, why (typed, `crate::base::failure`) and the log's tail. The device phase
//! reads it; a recorded failure counts only while its step's key is unchanged. A record
//! of another version reads as empty (docs/warm.md).

use std::path::Path;

use serde::{Deserialize, Serialize, Serializer};

use crate::base::failure::{Failure, StepFailure};
use crate::base::fsutil::{self, Stamp};
use crate::base::stepid::Kind;
use crate::base::stepid::StepId;

/// 2: a failure is kept typed (`failure`); 1 had its text only (`error`).
pub const RECORD_VERSION: u32 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Built,
    Hit,
    Failed,
    /// Not run because a step it depends on failed.
    Skipped,
}

/// One step's record. In the file it also has `error`, its failure's text, for the people
/// and tools that read `warm.json`; that is written, never read back.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct StepRecord {
    pub kind: Kind,
    pub scene: String,
    pub name: String,
    pub key: String,
    pub outcome: Outcome,
    pub duration_secs: f64,
    pub log: Option<String>,
    /// Why it failed or was not run (None when it was built or hit).
    pub failure: Option<Failure>,
    pub log_tail: Option<String>,
}

/// A step record as warm.json has it (what `Serialize` below writes, `error` included):
/// the schema's source (schemas/warm.schema.json).
#[cfg(test)]
#[derive(schemars::JsonSchema)]
#[allow(dead_code)]
#[schemars(rename = "StepRecord")]
struct StepRecordFile {
    kind: Kind,
    scene: String,
    name: String,
    key: String,
    outcome: Outcome,
    duration_secs: f64,
    log: Option<String>,
    /// The failure's text, for people and tools (written, never read back).
    error: Option<String>,
    failure: Option<Failure>,
    log_tail: Option<String>,
}

#[cfg(test)]
impl schemars::JsonSchema for StepRecord {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        StepRecordFile::schema_name()
    }

    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        StepRecordFile::json_schema(g)
    }
}

impl Serialize for StepRecord {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut r = s.serialize_struct("StepRecord", 10)?;
        r.serialize_field("kind", &self.kind)?;
        r.serialize_field("scene", &self.scene)?;
        r.serialize_field("name", &self.name)?;
        r.serialize_field("key", &self.key)?;
        r.serialize_field("outcome", &self.outcome)?;
        r.serialize_field("duration_secs", &self.duration_secs)?;
        r.serialize_field("log", &self.log)?;
        let error = self.failure.as_ref().map(Failure::to_string);
        r.serialize_field("error", &error)?;
        r.serialize_field("failure", &self.failure)?;
        r.serialize_field("log_tail", &self.log_tail)?;
        r.end()
    }
}

impl StepRecord {
    pub fn id(&self) -> StepId {
        StepId::new(self.kind, &self.scene, &self.name)
    }

    /// Whether this is the record a hit of `id` under `key` gets (`secs` long, no log:
    /// nothing ran, and a report names only files that exist), checked without building
    /// that record: a no-op warm asks it of every step.
    pub fn is_hit_of(&self, id: &StepId, key: &str, secs: f64) -> bool {
        self.kind == id.kind
            && self.outcome == Outcome::Hit
            && self.duration_secs == secs
            && self.key == key
            && self.scene == id.scene
            && self.name == id.name
            && self.failure.is_none()
            && self.log_tail.is_none()
            && self.log.is_none()
    }
}

/// A step's record as one warm leaves it: the one at this index of the record the plan
/// loaded, unchanged, or a new one.
#[derive(Debug, Clone, PartialEq)]
pub enum Recorded {
    Same(usize),
    New(StepRecord),
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct WarmRecord {
    pub version: u32,
    pub steps: Vec<StepRecord>,
    /// The file as it was read (None: not read), to tell later whether it changed since.
    #[serde(skip)]
    stamp: Option<Stamp>,
}

impl WarmRecord {
    pub fn path(job_dir: &Path) -> std::path::PathBuf {
        crate::base::layout::warm_record(job_dir)
    }

    pub fn load(job_dir: &Path) -> WarmRecord {
        let path = Self::path(job_dir);
        // Stamped before reading: a write in between makes the stamp stale, not wrong.
        let before = Stamp::at(&path);
        let mut rec = crate::base::fsutil::read_kept(&path, crate::base::fsutil::Cap::WARM_RECORD)
            .and_then(|b| serde_json::from_slice::<WarmRecord>(&b).ok())
            .filter(|r| r.version == RECORD_VERSION)
            .unwrap_or_default();
        rec.stamp = before.filter(|_| !rec.steps.is_empty());
        rec
    }

    /// The warm record at `path`, for a reader that was handed it (`fleet simulate
    /// --from-reports`): absent is an empty record; one that cannot be read (a link, a
    /// FIFO, over its cap) or parsed is an error naming it.
    pub fn read(path: &Path) -> std::io::Result<WarmRecord> {
        match crate::base::fsutil::read_capped(path, crate::base::fsutil::Cap::WARM_RECORD) {
            Ok(b) => {
                let rec: WarmRecord = serde_json::from_slice(&b)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
                Ok(if rec.version == RECORD_VERSION {
                    rec
                } else {
                    WarmRecord::default()
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(WarmRecord::default()),
            Err(e) => Err(e),
        }
    }

    /// The recorded failures, indexed by step.
    pub fn failures(&self) -> Failures<'_> {
        Failures(
            self.steps
                .iter()
                .filter(|r| matches!(r.outcome, Outcome::Failed | Outcome::Skipped))
                .map(|r| (r.id(), r))
                .collect(),
        )
    }

    /// Replace the records of the steps this warm ran, keep the others. A record that
    /// would not change (a no-op warm: every step a hit, as last time) is not rewritten.
    /// `loaded` is the record as the plan read it: used again when the file is still
    /// that one, read anew when another warm of this checkout wrote it meanwhile.
    pub fn merge_and_save(
        job_dir: &Path,
        loaded: &WarmRecord,
        new: Vec<Recorded>,
    ) -> std::io::Result<()> {
        let current = matches!(loaded.stamp, Some(s) if Stamp::at(&Self::path(job_dir)) == Some(s));
        // Every step's record is the loaded one at its own place, and there are no
        // others: the file would be written as it is.
        let unchanged = new
            .iter()
            .enumerate()
            .all(|(at, r)| *r == Recorded::Same(at));
        if current && unchanged && new.len() == loaded.steps.len() {
            return Ok(());
        }
        let new: Vec<StepRecord> = new
            .into_iter()
            .map(|r| match r {
                Recorded::Same(at) => loaded.steps[at].clone(),
                Recorded::New(r) => r,
            })
            .collect();
        let reread;
        let rec = match current {
            true => loaded,
            false => {
                reread = WarmRecord::load(job_dir);
                &reread
            }
        };
        // Steps by borrowed (kind, scene, name): a no-op warm compares thousands.
        fn id(r: &StepRecord) -> (Kind, &str, &str) {
            (r.kind, &r.scene, &r.name)
        }
        if rec.version == RECORD_VERSION {
            let old: std::collections::HashMap<_, &StepRecord> =
                rec.steps.iter().map(|r| (id(r), r)).collect();
            if old.len() == rec.steps.len() && new.iter().all(|n| old.get(&id(n)) == Some(&n)) {
                return Ok(());
            }
        }
        let replaced: std::collections::HashSet<_> = new.iter().map(id).collect();
        let mut steps: Vec<StepRecord> = rec
            .steps
            .iter()
            .filter(|o| !replaced.contains(&id(o)))
            .cloned()
            .collect();
        drop(replaced);
        steps.extend(new);
        let rec = WarmRecord {
            version: RECORD_VERSION,
            steps,
            stamp: None,
        };
        fsutil::write_atomic(&Self::path(job_dir), &rec.to_json())
    }

    /// The file's text: one line per step (a failure's `error` and its typed `failure`
    /// side by side stay smaller than one pretty-printed record was; a record of
    /// thousands of steps stays greppable by step), the head as `to_vec_pretty` has it.
    fn to_json(&self) -> Vec<u8> {
        let mut out = format!("{{\n  \"version\": {},\n  \"steps\": [", self.version).into_bytes();
        for (i, step) in self.steps.iter().enumerate() {
            out.extend_from_slice(if i == 0 { b"\n    " } else { b",\n    " });
            serde_json::to_writer(&mut out, step).expect("a step record serializes");
        }
        out.extend_from_slice(match self.steps.is_empty() {
            true => b"]\n}",
            false => b"\n  ]\n}",
        });
        out
    }
}

/// Failed steps of a warm record, by step.
pub struct Failures<'a>(std::collections::HashMap<StepId, &'a StepRecord>);

impl Failures<'_> {
    /// The failure recorded for this step with this exact key, with its log's tail. A
    /// failed record that does not say why (not one scenerun writes) is no failure: the
    /// step is warmed again.
    pub fn get(&self, step: &StepId, key: &str) -> Option<StepFailure> {
        let r = self.0.get(step).filter(|r| r.key == key)?;
        Some(StepFailure {
            failure: r.failure.clone()?,
            log_tail: r.log_tail.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(name: &str, key: &str, outcome: Outcome) -> StepRecord {
        StepRecord {
            kind: Kind::Kernel,
            scene: "s".into(),
            name: name.into(),
            key: key.into(),
            outcome,
            duration_secs: 0.0,
            log: None,
            failure: None,
            log_tail: None,
        }
    }

    fn names(job: &Path) -> Vec<(String, String)> {
        let mut v: Vec<_> = WarmRecord::load(job)
            .steps
            .into_iter()
            .map(|r| (r.name, r.key))
            .collect();
        v.sort();
        v
    }

    /// This warm loads the record, another then writes step `c` into it, and this one
    /// saves `ours`.
    fn after_another_warm_wrote_c(job: &Path, ours: Vec<Recorded>) {
        let loaded = WarmRecord::load(job);
        let other = WarmRecord::load(job);
        let c = vec![Recorded::New(step("c", "k1", Outcome::Hit))];
        WarmRecord::merge_and_save(job, &other, c).unwrap();
        WarmRecord::merge_and_save(job, &loaded, ours).unwrap();
    }

    #[test]
    fn merge_reuses_the_loaded_record_only_while_the_file_is_unchanged() {
        let t = tempfile::tempdir().unwrap();
        let job = t.path();
        std::fs::create_dir_all(WarmRecord::path(job).parent().unwrap()).unwrap();
        let first = vec![
            Recorded::New(step("a", "k1", Outcome::Built)),
            Recorded::New(step("b", "k1", Outcome::Built)),
        ];
        WarmRecord::merge_and_save(job, &WarmRecord::default(), first).unwrap();

        // Unchanged file: the loaded record is merged into and written back.
        let loaded = WarmRecord::load(job);
        WarmRecord::merge_and_save(
            job,
            &loaded,
            vec![Recorded::New(step("a", "k2", Outcome::Built))],
        )
        .unwrap();
        assert_eq!(
            names(job),
            [("a".into(), "k2".into()), ("b".into(), "k1".into())]
        );

        // Another warm writes `c` after this one loaded: its step survives the merge.
        after_another_warm_wrote_c(job, vec![Recorded::New(step("b", "k3", Outcome::Built))]);
        assert_eq!(
            names(job),
            [
                ("a".into(), "k2".into()),
                ("b".into(), "k3".into()),
                ("c".into(), "k1".into())
            ]
        );
    }

    #[test]
    fn records_unchanged_in_place_are_not_written_and_survive_a_concurrent_warm() {
        let t = tempfile::tempdir().unwrap();
        let job = t.path();
        let first = vec![
            Recorded::New(step("a", "k1", Outcome::Hit)),
            Recorded::New(step("b", "k1", Outcome::Hit)),
        ];
        WarmRecord::merge_and_save(job, &WarmRecord::default(), first).unwrap();
        let stamp = Stamp::at(&WarmRecord::path(job));

        // A no-op: every record the loaded one in its place. The file is left alone.
        let loaded = WarmRecord::load(job);
        let same = || vec![Recorded::Same(0), Recorded::Same(1)];
        std::thread::sleep(std::time::Duration::from_millis(20));
        WarmRecord::merge_and_save(job, &loaded, same()).unwrap();
        assert_eq!(Stamp::at(&WarmRecord::path(job)), stamp);

        // In another order: resolved and compared by step, still nothing to write.
        WarmRecord::merge_and_save(job, &loaded, vec![Recorded::Same(1), Recorded::Same(0)])
            .unwrap();
        assert_eq!(Stamp::at(&WarmRecord::path(job)), stamp);
        assert_eq!(
            names(job),
            [("a".into(), "k1".into()), ("b".into(), "k1".into())]
        );

        // Another warm wrote `c` meanwhile: the same records are merged into its file.
        after_another_warm_wrote_c(job, same());
        assert_eq!(
            names(job),
            [
                ("a".into(), "k1".into()),
                ("b".into(), "k1".into()),
                ("c".into(), "k1".into())
            ]
        );
    }

    #[test]
    fn the_file_has_one_line_per_step_and_reads_back_as_written() {
        for n in [0, 1, 3] {
            let rec = WarmRecord {
                version: RECORD_VERSION,
                steps: (0..n)
                    .map(|i| step(&format!("k{i}"), "key", Outcome::Built))
                    .collect(),
                stamp: None,
            };
            let text = String::from_utf8(rec.to_json()).unwrap();
            let lines = if n == 0 { 4 } else { 5 + n };
            assert_eq!(text.lines().count(), lines, "{text}");
            let back: WarmRecord = serde_json::from_str(&text).unwrap();
            assert_eq!((back.version, back.steps), (rec.version, rec.steps));
        }
    }

    #[test]
    fn a_hit_record_is_recognised_field_by_field() {
        let id = StepId::new(Kind::Kernel, "s", "a");
        let mut r = step("a", "k1", Outcome::Hit);
        r.log = None;
        assert!(r.is_hit_of(&id, "k1", 0.0));
        assert!(!r.is_hit_of(&id, "k2", 0.0));
        assert!(!r.is_hit_of(&id, "k1", 1.0));
        assert!(!r.is_hit_of(&StepId::new(Kind::Kernel, "s", "b"), "k1", 0.0));
        for change in [
            |r: &mut StepRecord| r.outcome = Outcome::Built,
            |r: &mut StepRecord| r.failure = Some(Failure::Infra("e".into())),
            |r: &mut StepRecord| r.log_tail = Some("t".into()),
            |r: &mut StepRecord| r.log = Some("/w/build/scenerun/logs/s/compile-a.log".into()),
            |r: &mut StepRecord| r.kind = Kind::Fixture,
        ] {
            let mut other = r.clone();
            change(&mut other);
            assert!(!other.is_hit_of(&id, "k1", 0.0), "{other:?}");
        }
    }
}
