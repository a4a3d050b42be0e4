//! The code's shape, checked: a module imports only from its own layer and the layers
//! below it (docs/architecture.md draws them), the top-level modules import each other
//! in no cycle, and no function outside tests is longer than 100 lines. A new top-level
//! module must be given a layer here (and in the doc) before this passes.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Bottom to top; a module may import from its own layer and from the layers below.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "base",
        &[
            "device_ids",
            "error",
            "exit",
            "failure",
            "fsutil",
            "identity",
            "layout",
            "notice",
            "proc",
            "record",
            "sampling",
            "seal",
            "stepid",
            "template",
            "ui",
            "units",
            "verdict",
            "warning",
        ],
    ),
    ("input", &["manifest", "select"]),
    ("keys", &["key"]),
    ("store", &["cache"]),
    ("plan", &["plan"]),
    ("phases", &["warm", "device", "compiled"]),
    ("readers", &["explain", "report", "affected", "fleet"]),
    ("app", &["commands", "cli", "schemas"]),
    ("entry", &["entry"]),
];

/// The longest a function outside tests may be.
const MAX_FN_LINES: usize = 100;

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, mods)| mods.contains(&module))
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).expect("src is readable").flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a file belongs to (`src/cache/lookup.rs` → `cache`; a base
/// module in `src/base/` by its own name, `src/base/units.rs` → `units`); None for the
/// crate root, the binary and `src/base/mod.rs`.
fn module_of(path: &Path) -> Option<String> {
    let rel = path.strip_prefix(src()).ok()?;
    let rel = rel.strip_prefix(BASE_DIR).unwrap_or(rel);
    let first = rel.components().next()?.as_os_str().to_string_lossy();
    let name = first.strip_suffix(".rs").unwrap_or(&first).to_string();
    (!matches!(name.as_str(), "lib" | "main" | "mod")).then_some(name)
}

/// The folder of the base layer's small modules (`crate::base::units`).
const BASE_DIR: &str = "base";

/// The base layer's modules that are folders of their own at the root (`proc/`, the one
/// place a child starts); every other base module lives in `src/base/`.
const BASE_AT_ROOT: &[&str] = &[];

/// A file's text without its unit tests (`#[cfg(test)] mod tests { ... }` to the end,
/// as the tests of a module come last).
fn without_tests(text: &str) -> &str {
    match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    }
}

/// The top-level modules a file's code names: `crate::x` paths, and the items of
/// `use crate::{x, y::z}` groups.
fn imports(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let word = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for (i, _) in text.match_indices("crate::") {
        let rest = &text[i + "crate::".len()..];
        // `crate::base::x` names the base module `x`.
        let rest = rest.strip_prefix("base::").unwrap_or(rest);
        if let Some(group) = rest.strip_prefix('{') {
            let body = &group[..group.find("};").unwrap_or(group.len())];
            // Each item of the group starts after `{`, `,` or whitespace at depth 0.
            let mut depth = 0;
            let mut start = true;
            for (k, c) in body.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if c.is_whitespace() => {}
                    _ if start && depth == 0 => {
                        out.insert(word(&body[k..]));
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            out.insert(word(rest));
        }
    }
    out
}

/// Functions longer than `MAX_FN_LINES`: (file:line name, lines). A function runs from
/// its `fn` line to the first line that closes it at the same indentation.
fn long_functions(path: &Path, text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = without_tests(text).lines().collect();
    let mut out = Vec::new();
    let mut k = 0;
    while k < lines.len() {
        let line = lines[k];
        let indent = line.len() - line.trim_start().len();
        let t = line.trim_start();
        let t = t.strip_prefix("pub(crate) ").unwrap_or(t);
        let t = t.strip_prefix("pub(super) ").unwrap_or(t);
        let t = t.strip_prefix("pub ").unwrap_or(t);
        let t = t.strip_prefix("unsafe ").unwrap_or(t);
        if !t.starts_with("fn ") || line.trim_end().ends_with(';') {
            k += 1;
            continue;
        }
        let close = format!("{}}}", " ".repeat(indent));
        let end = (k + 1..lines.len())
            .find(|&j| lines[j].starts_with(&close))
            .unwrap_or(lines.len() - 1);
        let n = end - k + 1;
        if n > MAX_FN_LINES {
            let name: String = t["fn ".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            out.push((format!("{}:{} {name}", path.display(), k + 1), n));
        }
        k = end + 1;
    }
    out
}

/// Imports that point up the layer table, and modules the table does not know.
fn violations(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut out = Vec::new();
    for (from, tos) in edges {
        let Some(lf) = layer_of(from) else {
            out.push(format!(
                "module `{from}` has no layer: add it to LAYERS and docs/architecture.md"
            ));
            continue;
        };
        for to in tos {
            if let Some(lt) = layer_of(to) {
                if lt > lf {
                    out.push(format!(
                        "`{from}` ({}) imports `{to}` ({}), a higher layer",
                        LAYERS[lf].0, LAYERS[lt].0
                    ));
                }
            }
        }
    }
    out
}

/// Cycles among the top-level modules: each one found, as a path.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    fn visit(
        m: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        out: &mut Vec<String>,
    ) {
        if let Some(at) = path.iter().position(|p| p == m) {
            let mut cycle = path[at..].to_vec();
            cycle.push(m.to_string());
            out.push(cycle.join(" -> "));
            return;
        }
        if done.contains(m) {
            return;
        }
        path.push(m.to_string());
        for next in edges.get(m).into_iter().flatten() {
            visit(next, edges, path, done, out);
        }
        path.pop();
        done.insert(m.to_string());
    }
    let mut out = Vec::new();
    let mut done = BTreeSet::new();
    for m in edges.keys() {
        visit(m, edges, &mut Vec::new(), &mut done, &mut out);
    }
    out
}

/// Top-level module → the top-level modules its files import.
fn import_graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(f)).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let Some(m) = module_of(f) else { continue };
        let text = fs::read_to_string(f).expect("a source file");
        let to: BTreeSet<String> = imports(without_tests(&text))
            .into_iter()
            .filter(|n| *n != m && modules.contains(n))
            .collect();
        edges.entry(m).or_default().extend(to);
    }
    edges
}

#[test]
fn imports_point_down_the_layers_and_form_no_cycle() {
    let edges = import_graph();
    assert!(edges.len() > 20, "found too few modules: {edges:?}");
    let bad = violations(&edges);
    assert!(bad.is_empty(), "layering:\n  {}", bad.join("\n  "));
    let found = cycles(&edges);
    assert!(found.is_empty(), "import cycles:\n  {}", found.join("\n  "));
}

#[test]
fn no_function_outside_tests_is_longer_than_100_lines() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files.sort();
    let long: Vec<String> = files
        .iter()
        .flat_map(|f| long_functions(f, &fs::read_to_string(f).expect("a source file")))
        .map(|(at, n)| format!("{at} ({n} lines)"))
        .collect();
    assert!(long.is_empty(), "split these:\n  {}", long.join("\n  "));
}

/// The checks themselves find what they are for.
#[test]
fn the_checks_catch_an_upward_import_a_cycle_and_a_long_function() {
    let code = "use crate::plan::Plan;
use crate::base::fsutil;\nfn f() { crate::report::x(); }\n";
    assert_eq!(
        imports(code),
        ["fsutil", "plan", "report"].map(String::from).into()
    );
    let mut edges = BTreeMap::new();
    edges.insert("cache".to_string(), imports(code));
    let bad = violations(&edges);
    assert_eq!(bad.len(), 2, "{bad:?}");
    assert!(
        bad[0].contains("`cache` (store) imports `plan` (plan)"),
        "{bad:?}"
    );
    edges.insert("plan".to_string(), ["cache".to_string()].into());
    assert_eq!(cycles(&edges), ["cache -> plan -> cache"]);
    edges.insert("newmod".to_string(), BTreeSet::new());
    assert!(violations(&edges)
        .iter()
        .any(|v| v.contains("`newmod` has no layer")));
    let long = format!("pub fn f() {{\n{}}}\n", "    x();\n".repeat(MAX_FN_LINES));
    assert_eq!(long_functions(Path::new("x.rs"), &long).len(), 1);
    let test_only = format!("#[cfg(test)]\nmod tests {{\n{long}}}\n");
    assert!(long_functions(Path::new("x.rs"), &test_only).is_empty());
}

/// Files outside `src/base/proc/` that still start a child with
/// `Command::new`: none (git and the compilers go through `proc::program`); a file
/// never joins it.
const CHILD_STARTS_ALLOWED: [&str; 0] = [];

/// Files of the phases (`src/warm/`, `src/device/`) that still print to the terminal
/// (`ui.` or a print macro) instead of emitting events and notices for report/ to
/// render: none (DESIGN.md §30); a file never joins it.
const PHASE_PRINTERS_ALLOWED: [&str; 0] = [];

fn starts_a_child(code: &str) -> bool {
    code.contains("Command::new(")
}

fn prints(code: &str) -> bool {
    let ui = code.match_indices("ui.").any(|(i, _)| {
        !code[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    });
    ui || ["println!", "eprintln!", "print!(", "eprint!("]
        .iter()
        .any(|m| code.contains(m))
}

/// `src/`-relative paths of the non-test files under `dir` for which `bad` holds.
fn offenders(dir: &Path, bad: fn(&str) -> bool) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    let mut out: Vec<String> = files
        .iter()
        .filter(|p| !p.to_string_lossy().ends_with("_tests.rs"))
        .filter(|p| bad(without_tests(&fs::read_to_string(p).unwrap())))
        .map(|p| p.strip_prefix(src()).unwrap().display().to_string())
        .collect();
    out.sort();
    out
}

#[test]
fn children_start_only_in_proc() {
    let found: Vec<String> = offenders(&src(), starts_a_child)
        .into_iter()
        .filter(|f| !f.starts_with("base/proc/"))
        .collect();
    let new: Vec<&String> = found
        .iter()
        .filter(|f| !CHILD_STARTS_ALLOWED.contains(&f.as_str()))
        .collect();
    assert!(
        new.is_empty(),
        "start children through proc/ (proc::sh, proc::spawn), not Command::new: {new:?}"
    );
    let fixed: Vec<&&str> = CHILD_STARTS_ALLOWED
        .iter()
        .filter(|f| !found.iter().any(|g| g == *f))
        .collect();
    assert!(
        fixed.is_empty(),
        "no longer start children themselves: take them off CHILD_STARTS_ALLOWED: {fixed:?}"
    );
}

/// A deadline computed by hand: `Instant::now() + d` panics when `d` is past what the
/// clock holds (`units::later` is the one checked way to make one).
fn adds_to_now(code: &str) -> bool {
    code.contains("Instant::now() +")
}

#[test]
fn every_deadline_is_made_by_the_checked_helper() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let found: Vec<String> = files
        .iter()
        .filter(|p| adds_to_now(&fs::read_to_string(p).unwrap()))
        .map(|p| p.strip_prefix(src()).unwrap().display().to_string())
        .collect();
    assert!(
        found.is_empty(),
        "make deadlines with `units::later(Instant::now(), d)`, not `Instant::now() + d`: {found:?}"
    );
}

#[test]
fn the_phases_print_nothing_themselves() {
    let mut found = offenders(&src().join("warm"), prints);
    found.extend(offenders(&src().join("device"), prints));
    let new: Vec<&String> = found
        .iter()
        .filter(|f| !PHASE_PRINTERS_ALLOWED.contains(&f.as_str()))
        .collect();
    assert!(
        new.is_empty(),
        "warm/ and device/ emit events and notices; report/ renders them: {new:?}"
    );
    let fixed: Vec<&&str> = PHASE_PRINTERS_ALLOWED
        .iter()
        .filter(|f| !found.iter().any(|g| g == *f))
        .collect();
    assert!(
        fixed.is_empty(),
        "print nothing any more: take them off PHASE_PRINTERS_ALLOWED: {fixed:?}"
    );
}

#[test]
fn the_child_and_print_checks_catch_what_they_look_for() {
    assert!(starts_a_child(
        "let o = std::process::Command::new(\"git\");"
    ));
    assert!(!starts_a_child("let o = proc::sh(cmd);"));
    assert!(adds_to_now("let until = Instant::now() + GRACE;"));
    assert!(!adds_to_now("let until = later(Instant::now(), GRACE);"));
    assert!(prints("    ui.info(&line);"));
    assert!(prints("self.ui.out(&x)"));
    assert!(prints("eprintln!(\"x\")"));
    assert!(!prints("let gui = build_gui(); fn emit(e: Event) {}"));
}

/// The layout shows the layers: the base layer's modules are in `src/base/` (but for
/// `BASE_AT_ROOT`), and nothing else is there; the root holds the entry and the folders
/// of the layers above.
#[test]
fn the_base_layers_modules_are_in_one_folder() {
    let base = LAYERS[0].1;
    let mut misplaced = Vec::new();
    for e in fs::read_dir(src()).expect("src is readable").flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let module = name.strip_suffix(".rs").unwrap_or(&name);
        if base.contains(&module) && !BASE_AT_ROOT.contains(&module) {
            misplaced.push(format!("src/{name} (belongs in src/{BASE_DIR}/)"));
        }
    }
    for e in fs::read_dir(src().join(BASE_DIR))
        .expect("src/base is readable")
        .flatten()
    {
        let name = e.file_name().to_string_lossy().to_string();
        let module = name.strip_suffix(".rs").unwrap_or(&name);
        if module != "mod" && !base.contains(&module) {
            misplaced.push(format!("src/{BASE_DIR}/{name} (not a base module)"));
        }
    }
    assert!(misplaced.is_empty(), "{misplaced:?}");
}
