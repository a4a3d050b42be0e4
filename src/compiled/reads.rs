//! Every file a compile read, and every file whose appearance would change what it
//! reads: the preprocessor's dependency output for each translation unit, the linker's
//! for a link, and the places a header or library could appear that would be found
//! before the one that was (recorded as absent: `cache::ABSENT`). Invariant: a file a
//! compile may read is either listed here or makes the entry not kept.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::command::{Lang, Shape};

/// The directories the preprocessor searches for `#include`, in its order.
#[derive(Debug, Default, PartialEq)]
pub struct SearchPath {
    /// Searched for `"…"` only (after the including file's own directory).
    pub quote: Vec<PathBuf>,
    /// Searched for both `"…"` (after `quote`) and `<…>`.
    pub angle: Vec<PathBuf>,
}

/// The search path as the compiler itself prints it (`-E -v` on an empty input, with
/// the command's own options), relative directories resolved against `cwd`.
pub fn search_path(stderr: &str, cwd: &Path) -> SearchPath {
    let mut sp = SearchPath::default();
    let mut list = None;
    for line in stderr.lines() {
        if line.starts_with("#include \"...\" search starts here:") {
            list = Some(false);
        } else if line.starts_with("#include <...> search starts here:") {
            list = Some(true);
        } else if line.starts_with("End of search list.") {
            list = None;
        } else if let (Some(angle), true) = (list, line.starts_with(' ')) {
            let d = line.trim().trim_end_matches(" (framework directory)");
            let d = crate::key::normalize(&cwd.join(d));
            match angle {
                true => sp.angle.push(d),
                false => sp.quote.push(d),
            }
        }
    }
    sp
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

/// The places where a file that does not exist now would be found before the one the
/// compile read: for each `#include` line of each file read (`#if` not evaluated, so
/// more lines than the compiler followed), every place the preprocessor looks before
/// the first that holds a file — the including file's directory for `"…"`, then the
/// search path in order. A file appearing at one makes the entry stale (a needless
/// compile at worst). Libraries the linker read are matched by name (`libX.so`,
/// `libX.a`) in the `-L` directories, `LIBRARY_PATH` and where libraries were found.
pub fn absent(
    read: &[PathBuf],
    sp: &SearchPath,
    libs: &[PathBuf],
    lib_dirs: &[PathBuf],
) -> Vec<PathBuf> {
    let mut candidates: BTreeSet<PathBuf> = BTreeSet::new();
    let mut seen: BTreeSet<(Option<PathBuf>, String)> = BTreeSet::new();
    for f in read {
        let Ok(text) = std::fs::read(f) else { continue };
        for inc in crate::key::scan_includes(&text) {
            let own = inc
                .quoted
                .then(|| f.parent().map(Path::to_path_buf))
                .flatten();
            if !seen.insert((own.clone(), inc.name.clone())) {
                continue;
            }
            let quote = sp.quote.iter().filter(|_| inc.quoted);
            let chain = own.iter().chain(quote).chain(&sp.angle);
            for d in chain {
                let p = crate::key::normalize(&d.join(&inc.name));
                if std::fs::metadata(&p).is_ok_and(|m| m.is_file()) {
                    break;
                }
                candidates.insert(p);
            }
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
            for p in [
                d.join(format!("lib{stem}.so")),
                d.join(format!("lib{stem}.a")),
            ] {
                if !std::fs::metadata(&p).is_ok_and(|m| m.is_file()) {
                    candidates.insert(p);
                }
            }
        }
    }
    candidates.into_iter().collect()
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
        let sp = search_path(text, Path::new("/w"));
        assert_eq!(sp.quote, vec![PathBuf::from("/w/a")]);
        assert_eq!(
            sp.angle,
            vec![PathBuf::from("/w/c"), PathBuf::from("/usr/include")]
        );
    }

    #[test]
    fn a_header_that_would_shadow_one_read_is_a_place_recorded_absent() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, src) = (
            dir.path().join("a"),
            dir.path().join("b"),
            dir.path().join("src"),
        );
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(b.join("sub")).unwrap();
        std::fs::write(b.join("sub/x.h"), "").unwrap();
        std::fs::write(dir.path().join("c.h"), "").unwrap();
        let k = src.join("k.c");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(&k, "#include \"sub/x.h\"\n#include <c.h>\n").unwrap();
        let sp = SearchPath {
            quote: vec![],
            angle: vec![a.clone(), b.clone(), dir.path().to_path_buf()],
        };
        let got = absent(&[k], &sp, &[], &[]);
        // Next to the source, then a/, for "sub/x.h"; a/ and b/ for <c.h>; nothing after
        // where each was found.
        assert_eq!(
            got,
            vec![
                a.join("c.h"),
                a.join("sub/x.h"),
                b.join("c.h"),
                src.join("sub/x.h")
            ]
        );
    }
}
