//! Affected selection: `--changed PATH...` and `--changed-since REV` keep the scenes whose
//! inputs include a changed path — kernel sources, their include closure and recorded
//! depfile entries, fixture and golden inputs and depfile entries, and the scene's own
//! entry in the manifest. A change elsewhere in the manifest (env, toolchains, lock, ...)
//! affects every scene.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Result;

use crate::key::normalize;
use crate::plan::Plan;
use crate::select::Selection;

/// What changed: files (absolute, normalized), and for the manifest which of its lines
/// (None: the manifest changed but the lines are unknown, so every scene is affected).
#[derive(Debug, Default)]
pub struct Changes {
    pub files: HashSet<PathBuf>,
    pub manifest_lines: Option<BTreeSet<usize>>,
    pub manifest_changed: bool,
}

pub fn wanted(sel: &Selection) -> bool {
    !sel.changed.is_empty() || sel.changed_since.is_some()
}

fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let words: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
    let out = crate::base::proc::program("git", &words, dir, &Default::default())
        .stdin_null()
        .stdout_capture()
        .stderr_capture()
        .run()
        .map_err(|e| crate::base::error::err!(Usage, "--changed-since needs git: {e}"))?;
    if !out.status.success() {
        return Err(crate::base::error::err!(
            Usage,
            "--changed-since: `git {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// New-side line numbers touched by a `git diff -U0` (a pure deletion marks the lines
/// around it).
fn hunk_lines(diff: &str) -> BTreeSet<usize> {
    let mut lines = BTreeSet::new();
    for l in diff.lines().filter(|l| l.starts_with("@@")) {
        let Some(new) = l.split_whitespace().find(|w| w.starts_with('+')) else {
            continue;
        };
        let mut it = new[1..].split(',');
        let start: usize = it.next().and_then(|s| s.parse().ok()).unwrap_or(1);
        let count: usize = it.next().and_then(|s| s.parse().ok()).unwrap_or(1);
        if count == 0 {
            lines.insert(start);
            lines.insert(start + 1);
        } else {
            lines.extend(start..start + count);
        }
    }
    lines
}

/// The changed paths the selection names.
pub fn changes(sel: &Selection, manifest_file: &Path, manifest_dir: &Path) -> Result<Changes> {
    let cwd = std::env::current_dir()?;
    let manifest = normalize(&cwd.join(manifest_file));
    let mut c = Changes::default();
    for p in &sel.changed {
        c.files.insert(normalize(&cwd.join(p)));
    }
    if let Some(rev) = &sel.changed_since {
        let top = PathBuf::from(git(manifest_dir, &["rev-parse", "--show-toplevel"])?.trim());
        // `--end-of-options`: whatever `rev` holds, git reads it as a revision (the
        // command line refuses a leading `-` already; this holds for any caller).
        let mut names = git(
            &top,
            &["diff", "--name-only", "--end-of-options", rev, "--"],
        )?;
        names.push_str(&git(&top, &["ls-files", "--others", "--exclude-standard"])?);
        for n in names.lines().filter(|n| !n.is_empty()) {
            c.files.insert(normalize(&top.join(n)));
        }
        if c.files.contains(&manifest) {
            let diff = git(
                &top,
                &[
                    "diff",
                    "-U0",
                    "--end-of-options",
                    rev,
                    "--",
                    &manifest.display().to_string(),
                ],
            )?;
            // An untracked manifest has no diff: every line is new.
            if !diff.trim().is_empty() {
                c.manifest_lines = Some(hunk_lines(&diff));
            }
        }
    }
    c.manifest_changed = c.files.contains(&manifest);
    Ok(c)
}

/// The names of the plan's scenes affected by `c`.
pub fn affected(plan: &Plan, c: &Changes) -> Result<Vec<String>> {
    let m = &plan.manifest;
    // The manifest: which scene's entry each changed line is in.
    let mut whole_manifest = false;
    let mut scene_lines: HashSet<usize> = HashSet::new();
    if c.manifest_changed {
        match &c.manifest_lines {
            None => whole_manifest = true,
            Some(lines) => {
                // Where the manifest's parts were when it was loaded.
                let layout = &m.layout;
                let total = layout.lines + 1;
                let mut bounds: Vec<usize> = Vec::new();
                let mut starts: Vec<(usize, usize)> = Vec::new();
                for (i, at) in layout.scenes.iter().enumerate() {
                    if let Some(p) = at.start {
                        starts.push((i, p.line));
                        bounds.push(p.line);
                    }
                }
                bounds.extend(&layout.top_lines);
                bounds.sort();
                bounds.push(total + 1);
                for &line in lines {
                    let owner = starts.iter().find(|(_, s)| {
                        let end = bounds
                            .iter()
                            .find(|b| **b > *s)
                            .copied()
                            .unwrap_or(total + 1);
                        line >= *s && line < end
                    });
                    match owner {
                        Some((i, _)) => {
                            scene_lines.insert(*i);
                        }
                        None => whole_manifest = true,
                    }
                }
            }
        }
    }
    let hit = |p: &Path| c.files.contains(p);
    let rel = |name: &str| normalize(&m.dir.join(name));
    let mut out = Vec::new();
    for ps in &plan.scenes {
        let mut yes = whole_manifest || scene_lines.contains(&ps.index);
        for &si in ps
            .kernels
            .iter()
            .chain(&ps.fixture)
            .chain(&ps.golden)
            .chain(&ps.prepare)
        {
            if yes {
                break;
            }
            let s = &plan.steps[si];
            let inputs = plan.key_inputs(si).unwrap_or_default();
            yes = inputs.files.iter().any(|(f, _)| hit(&rel(f)))
                || inputs
                    .closure
                    .as_ref()
                    .is_some_and(|cl| cl.files().any(|n| hit(&rel(&n.name))))
                || s.entry
                    .clone()
                    // A stale entry (a recorded dependency changed) still names its deps.
                    .or_else(|| plan.store_of(s).present(s.kind, &s.key).map(Arc::new))
                    .is_some_and(|e| e.meta.deps.iter().any(|d| hit(&rel(&d.path))));
        }
        if yes {
            out.push(ps.name.clone());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hunks_give_new_side_lines() {
        let d = "@@ -3,0 +4,2 @@\n+a\n+b\n@@ -10 +12 @@\n-x\n+y\n@@ -20,2 +21,0 @@\n";
        let l: Vec<usize> = hunk_lines(d).into_iter().collect();
        assert_eq!(l, vec![4, 5, 12, 21, 22]);
    }
}
