//! `scenes_from:` expanded: each generator runs only when its command, the manifest's
//! env or the content of its `inputs` changed; otherwise its output comes from the cache
//! dir (`generated/<key>.yaml`), so a no-op `warm` starts no generator. A kept output is
//! used only when its seal verifies with this user's secret (`seal`): one planted by
//! whoever can write the cache is never turned into commands. Its scenes join
//! the manifest's (`manifest::generated` reads them). Errors name the generator and the
//! line of its output; all are exit 4. See docs/pytest.md.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::key::{Files, KeyHasher};
use crate::manifest::generated::scenes_of;
use crate::manifest::Generator;
use crate::manifest::Manifest;

/// The content key of a generator's output.
fn key(g: &Generator, env: &BTreeMap<String, String>, files: &Files) -> Result<String> {
    let mut h = KeyHasher::new("scenes_from");
    h.field("command", g.run.as_bytes());
    h.env(env);
    h.field("input-count", &(g.inputs.len() as u64).to_le_bytes());
    for f in &g.inputs {
        let hash = files.hash(&f.abs).map_err(|e| {
            crate::base::error::err!(Usage, "{}: cannot read its input {}: {e}", g.label(), f.rel)
        })?;
        h.file("input", &f.rel, &hash);
    }
    Ok(h.finish())
}

/// What `expand` did, for tests and `-v`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Expanded {
    pub ran: usize,
    pub cached: usize,
}

/// Where a scene name came from, for clash messages.
enum Origin {
    Literal(usize),
    /// Index into the outputs, and the line of that output the scene starts at.
    Generated(usize, usize),
}

/// `scenes_from[0] (`cmd`) output line 12`.
fn place((g, _): &(Generator, String), line: usize) -> String {
    format!("{} output line {line}", g.label())
}

/// Run (or read from `cache_root`) every generator of `m` and add their scenes.
pub fn expand(m: &mut Manifest, cache_root: &Path, files: &Files) -> Result<Expanded> {
    let mut done = Expanded::default();
    if m.generators.is_empty() {
        return Ok(done);
    }
    // Before anything in it is read: a link at `generated/` (or at any directory the
    // cache keeps) is refused, exit 3, never followed.
    crate::cache::Store::at(cache_root.to_path_buf()).check()?;
    let mut names: HashMap<String, Origin> = m
        .scenes
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.clone(), Origin::Literal(i)))
        .collect();
    // Each generator's output and where its scenes are in it; output lines are looked up
    // only for a clash (indexing a large output costs on every load).
    let mut outputs: Vec<(Generator, String)> = Vec::new();
    let mut clashes = Vec::new();
    let generators = m.generators.clone();
    let mut kept = Vec::with_capacity(generators.len());
    for g in &generators {
        let key = key(g, &m.env, files)?;
        let cached = cached_path(cache_root, &key);
        let text = read_cached(&cached, &key);
        kept.push((key, cached, text));
    }
    // The generators whose output is not kept run at once, as many as the pool has
    // threads (one per core): they are independent processes (a selection's collection
    // each); their outputs are then taken in the order written, and the first failure
    // in that order is the error.
    let texts: Vec<Result<(String, bool)>> = {
        use rayon::prelude::*;
        let m = &*m;
        generators
            .par_iter()
            .zip(kept.par_iter_mut())
            .map(|(g, (_, _, text))| match text.take() {
                Some(text) => Ok((text, false)),
                None => run(g, m).map(|text| (text, true)),
            })
            .collect()
    };
    for ((g, (key, cached, _)), text) in generators.into_iter().zip(kept).zip(texts) {
        let (text, fresh) = text?;
        let (scenes, lines) = scenes_of(&g, &text, m)?;
        if fresh {
            crate::cache::Store::at(cache_root.to_path_buf()).ensure()?;
            write_cached(&cached, &key, &text).map_err(|e| {
                let what = format!(
                    "cannot keep the output of {} in {}",
                    g.label(),
                    cached.display()
                );
                crate::base::error::infra(what, e)
            })?;
            done.ran += 1;
            sweep_old(&cached, m.cache.max_age);
        } else {
            // Last use, for the sweep above (as cache entries are pruned by last use);
            // never through a link.
            use std::os::unix::fs::OpenOptionsExt;
            let _ = std::fs::File::options()
                .write(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
                .open(&cached)
                .and_then(|f| f.set_modified(std::time::SystemTime::now()));
            done.cached += 1;
        }
        outputs.push((g, text));
        let here = outputs.len() - 1;
        for (s, line) in scenes.into_iter().zip(lines) {
            let clash = match names.get(&s.name) {
                Some(Origin::Literal(i)) => format!("clashes with scenes[{i}] of the manifest"),
                Some(Origin::Generated(o, l)) => {
                    format!("clashes with the one at {}", place(&outputs[*o], *l))
                }
                None => {
                    names.insert(s.name.clone(), Origin::Generated(here, line));
                    m.scenes.push(s);
                    continue;
                }
            };
            clashes.push(format!(
                "{}: scene `{}` {clash}",
                place(&outputs[here], line),
                s.name
            ));
        }
    }
    files.save();
    if !clashes.is_empty() {
        return Err(crate::base::error::err!(
            Usage,
            "generated scene names must be unique:\n  {}",
            clashes.join("\n  ")
        ));
    }
    Ok(done)
}

fn cached_path(root: &Path, key: &str) -> PathBuf {
    root.join(crate::cache::GENERATED)
        .join(format!("{key}.yaml"))
}

/// The header line of a kept output, before its seal.
const HEADER: &str = "# scenerun scenes_from output, sealed ";

/// A kept output: a header line with its seal (`seal::tag` over the generator's key and
/// the output, with this user's secret), then the output. Anything else — a seal made
/// by someone else or for another key, an unsealed or damaged file, a link — is no
/// output: the generator runs again. Whoever can write the cache cannot make scenerun
/// run a command this way.
fn read_cached(path: &Path, key: &str) -> Option<String> {
    let bytes = crate::base::fsutil::read_kept(path, crate::base::fsutil::Cap::GENERATED)?;
    let text = String::from_utf8(bytes).ok()?;
    let (header, body) = text.split_once('\n')?;
    let tag = header.strip_prefix(HEADER)?;
    crate::base::seal::verify(SEAL_DOMAIN, key, body.as_bytes(), tag).then(|| body.to_string())
}

/// What the seal of a kept output is for.
const SEAL_DOMAIN: &str = "scenes_from output";

/// Outputs not used for `max_age` (the cache's own `max_age`) are removed when a
/// generator has run, so `generated/` does not grow with every edit of a test file.
/// Only regular files directly in the cache's own `generated/` (a real directory,
/// checked again here) are removed; a link is never followed.
fn sweep_old(keep: &Path, max_age: std::time::Duration) {
    let Some(dir) = keep.parent() else { return };
    if crate::base::fsutil::node(dir).ok() != Some(crate::base::fsutil::Node::Dir) {
        return;
    }
    let Ok(list) = std::fs::read_dir(dir) else {
        return;
    };
    let now = std::time::SystemTime::now();
    for e in list.flatten() {
        let old = e
            .metadata()
            .ok()
            .filter(|m| m.is_file())
            .and_then(|m| m.modified().ok())
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age > max_age);
        if old && e.path() != keep {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

fn write_cached(path: &Path, key: &str, text: &str) -> std::io::Result<()> {
    let header = format!(
        "{HEADER}{}\n",
        crate::base::seal::tag(SEAL_DOMAIN, key, text.as_bytes())
    );
    crate::base::fsutil::write_atomic(path, format!("{header}{text}").as_bytes())
}

/// Run the generator in the manifest's directory with the manifest's env, within its
/// `timeout` and as a registered process group (a cancel or a timeout kills all of it);
/// its stdout (at most `MAX_OUTPUT`) is the output, its stderr is shown only when it
/// fails.
fn run(g: &Generator, m: &Manifest) -> Result<String> {
    use crate::base::proc::Ended;
    use crate::manifest::generated::MAX_OUTPUT;
    let out = crate::base::proc::capture(
        &g.run,
        &m.dir,
        &m.env,
        g.timeout,
        MAX_OUTPUT,
        crate::base::proc::Stderr::Tail,
    )
    .map_err(|e| crate::base::error::err!(Usage, "{}: cannot run it: {e}", g.label()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    let tail = lines[lines.len().saturating_sub(20)..].join("\n    ");
    let tail = if tail.trim().is_empty() {
        String::new()
    } else {
        format!(":\n    {tail}")
    };
    let failed = |what: String| {
        Err(crate::base::error::err!(
            Usage,
            "{} {what}{tail}",
            g.label()
        ))
    };
    if out.overflowed {
        return failed(format!(
            "printed more than {} MiB (it was stopped there; scenes_from output is capped)",
            MAX_OUTPUT >> 20
        ));
    }
    match out.ended {
        Ended::Exited(0) => {}
        Ended::Interrupted => {
            return Err(crate::base::error::err!(
                Interrupted,
                "interrupted while {} ran (its process group was killed)",
                g.label()
            ))
        }
        Ended::TimedOut => {
            return failed(format!(
                "did not finish within {} (scenes_from[{}].timeout; its process group was killed)",
                humantime::format_duration(g.timeout),
                g.index
            ))
        }
        other => return failed(format!("failed ({})", other.describe())),
    }
    String::from_utf8(out.stdout).map_err(|_| {
        crate::base::error::err!(Usage, "{} printed output that is not UTF-8 text", g.label())
    })
}
