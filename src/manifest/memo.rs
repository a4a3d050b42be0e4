//! The manifest memo (`build/scenerun/manifest.json`, docs/cache.md): a manifest that
//! loaded without errors, kept with everything its validation looked at outside the
//! text, so the next run with the same text skips parsing it (the YAML and the typed
//! pass are ~45 % of a `plan` of 500 scenes).
//!
//! The invariant: a memo is used only if the next load would produce the same manifest.
//! It is keyed by the text (BLAKE3), the file as named, its directory, and the scenerun
//! binary (size, mtime, inode: a rebuilt scenerun may read manifests differently). And
//! every outside fact the validation consulted is recorded as a [`Probe`] with its answer
//! — each path resolved (existence, kind, link escapes), each input glob's matches, each
//! `$VAR` expanded — and asked again, the same way, before the memo is trusted. Anything
//! unreadable, stale or different means a full load; a manifest with errors is never kept.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::paths::{Probe, Resolver};
use super::{FileRef, Manifest};

/// Bump when `Manifest`, the key or the probes change shape.
const SCHEMA: u32 = 7;

thread_local! {
    /// The manifest directory while a memo is written or read on this thread: a path
    /// inside it is kept as its relative name only (most of a memo's bytes otherwise).
    static BASE: RefCell<Option<PathBuf>> = const { RefCell::new(None) };
}

/// `f` with `BASE` set to `dir`.
fn with_base<T>(dir: &Path, f: impl FnOnce() -> T) -> T {
    BASE.with(|b| *b.borrow_mut() = Some(dir.to_path_buf()));
    let out = f();
    BASE.with(|b| *b.borrow_mut() = None);
    out
}

/// A file as kept: `rel`, or `[rel, abs]` when `abs` is not `rel` under the base
/// directory (absolute paths, or no base).
impl Serialize for FileRef {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let derived = BASE.with(|b| {
            b.borrow().as_ref().is_some_and(|d| {
                !Path::new(&self.rel).is_absolute() && d.join(&self.rel) == self.abs
            })
        });
        if derived {
            self.rel.serialize(s)
        } else {
            (&self.rel, &self.abs).serialize(s)
        }
    }
}

impl<'de> Deserialize<'de> for FileRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Kept;
        impl<'de> serde::de::Visitor<'de> for Kept {
            type Value = FileRef;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a relative name or [name, path]")
            }

            fn visit_str<E: serde::de::Error>(self, rel: &str) -> Result<FileRef, E> {
                BASE.with(|b| match b.borrow().as_ref() {
                    Some(dir) => Ok(FileRef {
                        abs: joined(dir, rel),
                        rel: rel.to_string(),
                    }),
                    None => Err(E::custom("a relative name outside a memo")),
                })
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<FileRef, A::Error> {
                let missing = || serde::de::Error::custom("[name, path] expected");
                let rel = a.next_element()?.ok_or_else(missing)?;
                let abs = a.next_element()?.ok_or_else(missing)?;
                Ok(FileRef { rel, abs })
            }
        }
        d.deserialize_any(Kept)
    }
}

/// `dir.join(rel)` allocated once at its final size (`join` grows its copy of `dir`, and
/// a memo holds a path per kernel, source and include dir).
fn joined(dir: &Path, rel: &str) -> PathBuf {
    let mut abs = PathBuf::with_capacity(dir.as_os_str().len() + 1 + rel.len());
    abs.push(dir);
    abs.push(rel);
    abs
}

/// The file: `M` is `Manifest` as read, `&Manifest` as written.
#[derive(Serialize, Deserialize)]
struct MemoFile<M> {
    schema: u32,
    key: Key,
    probes: Vec<Probe>,
    manifest: M,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct Key {
    text: String,
    file: PathBuf,
    dir: PathBuf,
    exe: Option<crate::base::fsutil::Stamp>,
    /// The profile applied (`--profile`): another profile is another manifest.
    #[serde(default)]
    profile: Option<String>,
}

impl Key {
    pub(super) fn of(text: &str, file: &Path, dir: &Path, profile: Option<&str>) -> Key {
        Key {
            text: blake3::hash(text.as_bytes()).to_hex().to_string(),
            file: file.to_path_buf(),
            dir: dir.to_path_buf(),
            exe: exe_id(),
            profile: profile.map(str::to_string),
        }
    }
}

/// The running binary's stamp: changes whenever scenerun is rebuilt or replaced.
fn exe_id() -> Option<crate::base::fsutil::Stamp> {
    crate::base::fsutil::Stamp::at(&std::env::current_exe().ok()?)
}

fn path(dir: &Path) -> PathBuf {
    crate::base::layout::manifest_memo(&crate::base::layout::job_dir(dir))
}

/// What the seal of a memo is for (`seal`: a memo is turned into commands, so one
/// this user's scenerun did not write is never used).
const SEAL_DOMAIN: &str = "manifest memo";

/// The line after a memo's JSON: its seal.
const SEAL_LINE: &str = "\n# sealed ";

/// The memo's manifest, if this user's scenerun wrote it (its seal verifies), it is for
/// this text, and every probe still answers the same.
pub(super) fn read(key: &Key, dir: &Path) -> Option<Manifest> {
    let bytes =
        crate::base::fsutil::read_kept(&path(dir), crate::base::fsutil::Cap::MANIFEST_MEMO)?;
    let at = memchr_last(&bytes, SEAL_LINE.as_bytes())?;
    let (body, tag) = (&bytes[..at], &bytes[at + SEAL_LINE.len()..]);
    let tag = std::str::from_utf8(tag).ok()?.trim_end();
    if !crate::base::seal::verify(SEAL_DOMAIN, &seal_name(dir), body, tag) {
        return None;
    }
    let memo: MemoFile<Manifest> = with_base(dir, || serde_json::from_slice(body)).ok()?;
    if memo.schema != SCHEMA || memo.key != *key {
        return None;
    }
    // Asked again in runs, each by a context of its own: a big suite resolves thousands
    // of paths, an `lstat` each.
    let fresh = memo.probes.par_chunks(512).all(|run| {
        let paths = Resolver::new(dir);
        run.iter().all(|p| p.still_true(&paths))
    });
    fresh.then_some(memo.manifest)
}

/// The start of the last `needle` in `hay`.
fn memchr_last(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).rposition(|w| w == needle)
}

/// What a memo is sealed as: the directory it is for.
fn seal_name(dir: &Path) -> String {
    dir.display().to_string()
}

/// Keep a manifest that loaded without errors, with its probes. Only into an existing
/// `build/scenerun` (a `plan` or `warm` made it): loading a manifest creates nothing.
/// A failure costs the next run a full load, nothing else.
pub(super) fn write(key: Key, dir: &Path, probes: Vec<Probe>, m: &Manifest) {
    let at = path(dir);
    if !at.parent().is_some_and(Path::is_dir) {
        return;
    }
    let out = MemoFile {
        schema: SCHEMA,
        key,
        probes,
        manifest: m,
    };
    let _ = crate::base::fsutil::write_atomic_with(&at, |w| {
        let mut sealing = crate::base::seal::Sealing::new(SEAL_DOMAIN, &seal_name(dir), w);
        with_base(dir, || serde_json::to_writer(&mut sealing, &out))
            .map_err(std::io::Error::other)?;
        let (tag, w) = sealing.finish();
        writeln!(w, "{SEAL_LINE}{tag}")
    });
}

#[cfg(test)]
mod tests {
    use super::super::{load, parse};
    use std::fs;
    use std::path::Path;

    const MANIFEST: &str = "version: 1
toolchains:
  cc:
    compile: \"cc -c {source} -o {out} {includes}\"
scenes:
  - name: a
    kernels:
      - name: k
        toolchain: cc
        source: src/k.c
        include_dirs: [inc, \"$SCENERUN_MEMO_TEST_INC\"]
    fixture:
      run: \"cat data/*.txt > {out}\"
      inputs: [\"data/*.txt\"]
";

    fn suite() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        for dir in ["src", "inc", "inc2", "data", "build/scenerun"] {
            fs::create_dir_all(d.join(dir)).unwrap();
        }
        fs::write(d.join("src/k.c"), "int k;\n").unwrap();
        fs::write(d.join("data/a.txt"), "1\n").unwrap();
        fs::write(d.join("scenes.yaml"), MANIFEST).unwrap();
        t
    }

    /// What a load gives, comparable: the manifest as JSON, or the error text.
    fn outcome(r: Result<super::Manifest, super::super::ManifestErrors>) -> String {
        match r {
            Ok(m) => serde_json::to_string(&m).unwrap(),
            Err(e) => format!("error: {e}"),
        }
    }

    /// `load` (memo in place) against a parse that never sees a memo.
    fn same_as_fresh(file: &Path) {
        let dir = file.parent().unwrap().canonicalize().unwrap();
        let text = fs::read_to_string(file).unwrap();
        assert_eq!(outcome(load(file)), outcome(parse(&text, file, &dir)));
    }

    #[test]
    fn a_second_load_is_served_from_the_memo() {
        let t = suite();
        let file = t.path().join("scenes.yaml");
        let first = outcome(load(&file));
        let memo = t.path().join("build/scenerun/manifest.json");
        assert!(memo.is_file(), "the first load keeps a memo");
        assert_eq!(outcome(load(&file)), first);
        // Proof that the memo, not the text, answered: a change made only in the memo,
        // sealed again with this user's secret, shows up.
        let kept = fs::read_to_string(&memo).unwrap();
        let (body, _) = kept.rsplit_once(super::SEAL_LINE).unwrap();
        let edited = body.replace("\"platform\":\"default\"", "\"platform\":\"memo\"");
        fs::write(&memo, &edited).unwrap();
        assert_eq!(
            load(&file).unwrap().platform,
            "default",
            "an unsealed memo is not used"
        );
        let dir = t.path().canonicalize().unwrap();
        let tag = crate::base::seal::tag(
            super::SEAL_DOMAIN,
            &super::seal_name(&dir),
            edited.as_bytes(),
        );
        fs::write(&memo, format!("{edited}{}{tag}\n", super::SEAL_LINE)).unwrap();
        assert_eq!(load(&file).unwrap().platform, "memo");
    }

    #[test]
    fn every_outside_change_is_seen() {
        let t = suite();
        let d = t.path().to_path_buf();
        let file = d.join("scenes.yaml");
        type Change<'a> = (&'a str, Box<dyn Fn() + 'a>);
        let changes: Vec<Change> = vec![
            (
                "a new input matches the glob",
                Box::new(|| fs::write(d.join("data/b.txt"), "2").unwrap()),
            ),
            (
                "an input glob match is gone",
                Box::new(|| fs::remove_file(d.join("data/b.txt")).unwrap()),
            ),
            (
                "an include dir is gone",
                Box::new(|| fs::remove_dir(d.join("inc")).unwrap()),
            ),
            (
                "an include dir is back",
                Box::new(|| fs::create_dir(d.join("inc")).unwrap()),
            ),
            (
                "a $VAR include dir is set",
                Box::new(|| std::env::set_var("SCENERUN_MEMO_TEST_INC", "inc2")),
            ),
            (
                "a $VAR include dir is unset",
                Box::new(|| std::env::remove_var("SCENERUN_MEMO_TEST_INC")),
            ),
            (
                "the source became a link out of the checkout",
                Box::new(|| {
                    fs::remove_file(d.join("src/k.c")).unwrap();
                    std::os::unix::fs::symlink("/etc/hostname", d.join("src/k.c")).unwrap();
                }),
            ),
            (
                "the source is a directory",
                Box::new(|| {
                    fs::remove_file(d.join("src/k.c")).unwrap();
                    fs::create_dir(d.join("src/k.c")).unwrap();
                }),
            ),
            (
                "the source is gone",
                Box::new(|| fs::remove_dir(d.join("src/k.c")).unwrap()),
            ),
            (
                "the source is back",
                Box::new(|| fs::write(d.join("src/k.c"), "int k;\n").unwrap()),
            ),
            (
                "the text changed",
                Box::new(|| {
                    fs::write(
                        d.join("scenes.yaml"),
                        MANIFEST.replace("name: a", "name: b"),
                    )
                    .unwrap()
                }),
            ),
        ];
        load(&file).unwrap();
        for (what, change) in changes {
            // A memo from the state before the change...
            let _ = load(&file);
            change();
            // ...and the load after it agrees with a fresh parse.
            let dir = file.parent().unwrap().canonicalize().unwrap();
            let text = fs::read_to_string(&file).unwrap();
            assert_eq!(
                outcome(load(&file)),
                outcome(parse(&text, &file, &dir)),
                "{what}"
            );
        }
        same_as_fresh(&file);
    }

    #[test]
    fn nothing_is_kept_without_a_job_dir_or_for_a_broken_manifest() {
        let t = suite();
        let file = t.path().join("scenes.yaml");
        let memo = t.path().join("build/scenerun/manifest.json");
        fs::write(&file, MANIFEST.replace("src/k.c", "src/missing.c")).unwrap();
        assert!(load(&file).is_err());
        assert!(!memo.exists(), "a manifest with errors is not kept");
        fs::remove_dir_all(t.path().join("build")).unwrap();
        fs::write(&file, MANIFEST).unwrap();
        load(&file).unwrap();
        assert!(!t.path().join("build").exists(), "loading creates nothing");
    }

    #[test]
    fn a_damaged_memo_is_ignored() {
        let t = suite();
        let file = t.path().join("scenes.yaml");
        let first = outcome(load(&file));
        let memo = t.path().join("build/scenerun/manifest.json");
        for junk in ["", "{", "[1,2]", "{\"schema\":1}"] {
            fs::write(&memo, junk).unwrap();
            assert_eq!(outcome(load(&file)), first, "{junk}");
        }
    }
}
