//! Hostile YAML at scale (docs/guarantees.md, "Bounds"): inputs of tens or hundreds of
//! kilobytes that are deep (`? ? ? …`, `- - - …`, ever deeper indentation) or wide
//! (thousands of errors on one line). Each ends in exit 4 with bounded output: no
//! recursion a 20 KB input can overflow, no error that repeats a 600 KB line. The same
//! cases, cut to a few KB, are seeds of the manifest fuzzer (`fuzz/seeds/manifest/`),
//! which the long profile runs for a bounded time.

use std::fs;

use super::*;

/// Output allowed for any of these cases: 50 errors of at most a few hundred characters.
const MAX_STDERR: usize = 64 * 1024;

/// How big the hostile cases are: the field report's sizes, or the fuzzer's seeds.
#[derive(Clone, Copy)]
pub struct Size {
    /// Levels of `? ` / `- ` (10,000: 20 KB).
    pub deep: usize,
    /// Lines of ever deeper indentation.
    pub indent: usize,
    /// Invalid scenes on one line (2000: 115 KB).
    pub errors: usize,
    /// `[]` items on one line (200,000: 600 KB).
    pub items: usize,
    /// Bytes of one scalar.
    pub scalar: usize,
}

/// The field report's sizes.
pub const FULL: Size = Size {
    deep: 10_000,
    indent: 300,
    errors: 2000,
    items: 200_000,
    scalar: 200_000,
};

/// Seed sizes for the fuzzer (past every limit, a few KB each).
pub const SEED: Size = Size {
    deep: 150,
    indent: 120,
    errors: 60,
    items: 2000,
    scalar: 3000,
};

/// (name, manifest text) of every hostile case, at `size`.
pub fn hostile_yaml_cases(size: Size) -> Vec<(&'static str, String)> {
    let head = "version: 1\ncache:\n  dir: cache\nscenes:\n";
    let deep = size.deep;
    let mut indent = String::from(head);
    for i in 0..size.indent {
        indent.push_str(&" ".repeat(i + 2));
        indent.push_str("a:\n");
    }
    let scene = |i: usize| format!("{{name: s{i}, bogus{i}: padding-padding-padding-padding}}");
    let wide: Vec<String> = (0..size.errors).map(scene).collect();
    // Anchors whose aliases nest: each level adds its anchor's whole height.
    let mut aliases = String::from("version: 1\nx0: &a0 [[[[[[[[[[x]]]]]]]]]]\n");
    for i in 1..=deep / 10 {
        aliases.push_str(&format!("x{i}: &a{i} [[[[[[[[[[*a{}]]]]]]]]]]\n", i - 1));
    }
    vec![
        ("question marks", format!("{head}{}", "? ".repeat(deep))),
        (
            "question marks in a scene",
            format!("{head}  - name: x\n    env: {}", "? ".repeat(deep)),
        ),
        ("dashes", format!("{head}{}x\n", "- ".repeat(deep))),
        (
            "dash question",
            format!("{head}{}x\n", "- ? ".repeat(deep / 2)),
        ),
        ("indentation", indent),
        (
            "brackets",
            format!("{head}{}{}\n", "[".repeat(deep), "]".repeat(deep)),
        ),
        ("nested aliases", aliases),
        (
            "many errors on one line",
            format!(
                "version: 1\ncache:\n  dir: cache\nscenes: [{}]\n",
                wide.join(", ")
            ),
        ),
        (
            "a line of [[],[],...]",
            format!(
                "version: 1\nscenes: [{}]\n",
                vec!["[]"; size.items].join(",")
            ),
        ),
        (
            "a long scalar in a message",
            format!("version: {}\nscenes: []\n", "x".repeat(size.scalar)),
        ),
    ]
}

/// The file name of a case's seed in `fuzz/seeds/manifest/`.
fn seed_name(what: &str) -> String {
    let slug: String = what
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!(
        "hostile-{}.yaml",
        slug.split('-')
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>()
            .join("-")
    )
}

fn seeds_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/manifest")
}

fn check_bounded(faults: &mut Faults, what: &str, r: &Run) {
    faults.check(r.is(4), || format!("{what}: {}", r.desc()));
    faults.check(!r.stderr.contains("panicked"), || {
        format!("{what}: a panic: {}", r.desc())
    });
    faults.check(r.stderr.len() <= MAX_STDERR, || {
        format!(
            "{what}: {} bytes of error output (bound {MAX_STDERR}): {}",
            r.stderr.len(),
            tail(&r.stderr, 600)
        )
    });
    for line in r.stderr.lines() {
        let n = line.chars().count();
        if n > 400 {
            faults.add(format!("{what}: a {n}-character line of output"));
            break;
        }
    }
}

/// Every case through `scenerun plan`: exit 4, bounded output, in bounded time.
#[test]
fn hostile_yaml_is_exit_4_with_bounded_output() {
    const T: &str = "hostile_yaml";
    let mut faults = Faults::new(T);
    for (what, text) in hostile_yaml_cases(FULL) {
        let s = Suite::new();
        s.manifest(&text);
        let t = Instant::now();
        let r = exec(sr(&s, &["plan"]), secs(120));
        let ms = t.elapsed().as_millis();
        check_bounded(&mut faults, what, &r);
        figure(
            T,
            &format!(
                "{what} ({} KB) → exit {:?} in {ms} ms, {} bytes of output",
                text.len() / 1000,
                r.code,
                r.stderr.len()
            ),
        );
    }
    faults.finish();
}

/// The deep cases printed by a `scenes_from` generator: exit 4 naming it.
#[test]
fn hostile_yaml_from_a_generator_is_exit_4() {
    const T: &str = "hostile_yaml_generated";
    let mut faults = Faults::new(T);
    for (what, text) in hostile_yaml_cases(FULL) {
        let Some(body) = text.strip_prefix("version: 1\ncache:\n  dir: cache\nscenes:\n") else {
            continue;
        };
        let s = Suite::new();
        fs::write(s.path("out.yaml"), body).unwrap();
        s.manifest(
            "version: 1\ncache:\n  dir: cache\nscenes_from:\n  - run: \"cat out.yaml\"\n    inputs: [out.yaml]\nscenes: []\n",
        );
        let t = Instant::now();
        let r = exec(sr(&s, &["plan"]), secs(120));
        let ms = t.elapsed().as_millis();
        check_bounded(&mut faults, what, &r);
        faults.check(r.stderr.contains("scenes_from[0] (`cat out.yaml`)"), || {
            format!("{what}: the generator is not named: {}", r.desc())
        });
        figure(
            T,
            &format!(
                "{what} from a generator ({} KB) → exit {:?} in {ms} ms",
                body.len() / 1000,
                r.code
            ),
        );
    }
    faults.finish();
}

/// The seed-sized cases are the fuzzer's seeds, byte for byte (`SCENERUN_WRITE_SEEDS=1`
/// writes them after a change to the cases), and each is refused like the full size.
#[test]
fn hostile_yaml_seeds_are_in_the_fuzz_corpus() {
    let dir = seeds_dir();
    let write = std::env::var_os("SCENERUN_WRITE_SEEDS").is_some();
    let file = Path::new("scenes.yaml");
    for (what, text) in hostile_yaml_cases(SEED) {
        let p = dir.join(seed_name(what));
        if write {
            fs::write(&p, &text).unwrap();
        }
        let kept = fs::read_to_string(&p).unwrap_or_default();
        assert!(
            kept == text,
            "{} is not the seed of `{what}` (SCENERUN_WRITE_SEEDS=1 writes it)",
            p.display()
        );
        let r = scenerun::manifest::parse(&text, file, &dir);
        assert!(r.is_err(), "{what}: the seed-sized case is refused too");
    }
}

/// The long profile runs the manifest fuzzer (`fuzz/`, cargo-fuzz on a nightly toolchain)
/// from its seeds, these cases among them, for a bounded time: `SCENERUN_FUZZ_SECS`
/// (default 120) of libFuzzer, which must end without a crash. The fast profile skips it
/// (it needs nightly and builds a second copy of scenerun with sanitizer coverage).
#[test]
fn hostile_yaml_fuzz_long() {
    const T: &str = "hostile_yaml_fuzz";
    if !long_profile() {
        eprintln!("{T}: skipped in the fast profile (SCENERUN_RELIABILITY=long runs it)");
        return;
    }
    let secs: u64 = std::env::var("SCENERUN_FUZZ_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(120);
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let cargo = |args: &[&str]| {
        let mut c = StdCommand::new("cargo");
        c.current_dir(&fuzz)
            .args(args)
            .env_remove("RUSTUP_TOOLCHAIN")
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("RUSTFLAGS");
        c
    };
    let has = cargo(&["+nightly", "fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        has,
        "{T}: the long profile runs the manifest fuzzer; it needs a nightly toolchain and \
         cargo-fuzz (`rustup toolchain install nightly && cargo install cargo-fuzz`)"
    );
    let corpus = tempfile::tempdir().unwrap();
    let artifacts = tempfile::tempdir().unwrap();
    let mut c = cargo(&["+nightly", "fuzz", "run", "manifest"]);
    c.arg(corpus.path()).arg(seeds_dir()).arg("--").args([
        format!("-max_total_time={secs}"),
        "-max_len=16384".to_string(),
        "-timeout=30".to_string(),
        "-rss_limit_mb=4096".to_string(),
        format!("-artifact_prefix={}/", artifacts.path().display()),
    ]);
    // The build (first time: minutes) and the run, bounded: a hang is a failure.
    let r = exec(c, Duration::from_secs(secs + 1800));
    let runs = r
        .stderr
        .lines()
        .rev()
        .find_map(|l| {
            l.strip_prefix("Done ")
                .and_then(|x| x.split_whitespace().next())
        })
        .unwrap_or("?")
        .to_string();
    let crashes: Vec<String> = fs::read_dir(artifacts.path())
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().to_string())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        r.is(0) && crashes.is_empty(),
        "{T}: the fuzzer found {crashes:?}: {}",
        r.desc()
    );
    let seeds = fs::read_dir(seeds_dir()).map(|d| d.count()).unwrap_or(0);
    figure(
        T,
        &format!(
            "cargo fuzz run manifest from {seeds} seeds for {secs} s: {runs} inputs, 0 crashes"
        ),
    );
}
