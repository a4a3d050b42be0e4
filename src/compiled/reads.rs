//! Every file a compile read, and every file whose appearance would change what it
//! reads: the preprocessor's dependency output for each translation unit, the linker's
//! for a link, and the places a header or library could appear that would be found
//! before the one that was (recorded as absent: `cache::ABSENT`). Invariant: a file a
//! compile may read is either listed here or makes the entry not kept.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::command::{Lang, Shape};

/// The directories the preprocessor searches for `#include`, in its order, as the
/// compiler itself prints them (`-E -v` on an empty input, with the command's own
/// options): both the `"…"` and the `<…>` list.
pub fn search_dirs(stderr: &str) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let mut inside = false;
    for line in stderr.lines() {
        if line.starts_with("#include ") && line.ends_with("search starts here:") {
            inside = true;
        } else if line.starts_with("End of search list.") {
            inside = false;
        } else if inside && line.starts_with(' ') {
            let d = line.trim().trim_end_matches(" (framework directory)");
            dirs.push(crate::key::normalize(Path::new(d)));
        }
    }
    dirs
}

/// The arguments of the search path probe: the command's own options (its operands,
/// output and mode left out), then `-E -v -x LANG /dev/null`.
pub fn probe_args(shape: &Shape, lang: Lang) -> Vec<std::ffi::OsString> {
    let operands: BTreeSet<&Path> = shape
        .units
        .iter()
        .map(|(p, _)| p.as_path())
        .chain(shape.inputs.iter().map(PathBuf::as_path))
        .collect();
    let option_o = (!shape.joined).then(|| shape.out_at - 1);
    let mut out: Vec<std::ffi::OsString> = shape
        .args
        .iter()
        .enumerate()
        .filter(|(i, a)| {
            *i != shape.out_at
                && Some(*i) != option_o
                && *a != "-c"
                && *a != "-S"
                && !operands.contains(Path::new(a))
        })
        .map(|(_, a)| a.clone())
        .collect();
    out.extend(["-E", "-v", "-x", lang.x(), "/dev/null"].map(Into::into));
    out
}

/// The places where a file that does not exist now would be found before one the
/// compile read: for each file read under a searched directory (or next to another
/// file read, as `"…"` includes are), the same name in every searched directory and
/// every directory a file was read from. More than the compiler would look at, never
/// less: a file appearing at one of them makes the entry stale (a needless compile at
/// worst). Libraries the linker read are matched by name (`libX.so`, `libX.a`) in the
/// `-L` directories, `LIBRARY_PATH` and where libraries were found.
pub fn absent(
    read: &[PathBuf],
    dirs: &[PathBuf],
    libs: &[PathBuf],
    lib_dirs: &[PathBuf],
) -> Vec<PathBuf> {
    let mut all_dirs: BTreeSet<PathBuf> = dirs.iter().cloned().collect();
    all_dirs.extend(
        read.iter()
            .filter_map(|p| p.parent().map(Path::to_path_buf)),
    );
    let mut names: BTreeSet<PathBuf> = BTreeSet::new();
    for p in read {
        for d in &all_dirs {
            if let Ok(rel) = p.strip_prefix(d) {
                names.insert(rel.to_path_buf());
            }
        }
    }
    let mut candidates: BTreeSet<PathBuf> = BTreeSet::new();
    for d in &all_dirs {
        for n in &names {
            candidates.insert(d.join(n));
        }
    }
    let mut lib_all: BTreeSet<PathBuf> = lib_dirs.iter().cloned().collect();
    lib_all.extend(
        libs.iter()
            .filter_map(|p| p.parent().map(Path::to_path_buf)),
    );
    for lib in libs {
        let Some(name) = lib.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(stem) = name
            .strip_prefix("lib")
            .and_then(|s| s.strip_suffix(".so").or_else(|| s.strip_suffix(".a")))
        else {
            continue;
        };
        for d in &lib_all {
            candidates.insert(d.join(format!("lib{stem}.so")));
            candidates.insert(d.join(format!("lib{stem}.a")));
        }
    }
    candidates
        .into_iter()
        .filter(|c| !std::fs::metadata(c).is_ok_and(|m| m.is_file()))
        .collect()
}

/// The first file of `paths` (sources, headers, assembly) that tells the assembler to
/// read another file (`.incbin`, `.include`): what it reads is in no depfile.
pub fn assembler_reads(paths: &[PathBuf]) -> Option<PathBuf> {
    paths
        .iter()
        .find(|p| {
            std::fs::read(p).is_ok_and(|b| {
                b.windows(7).any(|w| w == b".incbin") || b.windows(8).any(|w| w == b".include")
            })
        })
        .cloned()
}

/// The `-L` directories of a command (joined or apart), resolved against `cwd`.
pub fn lib_dirs(args: &[std::ffi::OsString], cwd: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut it = args.iter().filter_map(|a| a.to_str());
    while let Some(a) = it.next() {
        let dir = match a {
            "-L" => it.next(),
            _ => a.strip_prefix("-L").filter(|d| !d.is_empty()),
        };
        out.extend(dir.map(|d| crate::key::normalize(&cwd.join(d))));
    }
    out.extend(
        std::env::var("LIBRARY_PATH")
            .unwrap_or_default()
            .split(':')
            .filter(|d| !d.is_empty())
            .map(|d| crate::key::normalize(&cwd.join(d))),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_search_list_is_read_from_what_the_compiler_prints() {
        let text = "ignoring nonexistent directory \"/x\"\n#include \"...\" search starts here:\n a\n#include <...> search starts here:\n b/../c\n /usr/include\nEnd of search list.\n";
        assert_eq!(
            search_dirs(text),
            vec![
                PathBuf::from("a"),
                PathBuf::from("c"),
                PathBuf::from("/usr/include")
            ]
        );
    }

    #[test]
    fn a_header_that_would_shadow_one_read_is_a_place_recorded_absent() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(b.join("sub")).unwrap();
        std::fs::write(b.join("sub/x.h"), "").unwrap();
        let got = absent(&[b.join("sub/x.h")], &[a.clone(), b.clone()], &[], &[]);
        assert!(got.contains(&a.join("sub/x.h")), "{got:?}");
        assert!(!got.contains(&b.join("sub/x.h")));
    }
}
