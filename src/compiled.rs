//! The compiles a suite's tests start in their own bodies (a plain test function that
//! builds its kernel before it runs it) go through the cache as `compiled` entries
//! (docs/compile-cache.md): the same command, from the same directory, with the same
//! compiler and every file it read unchanged, gets what that compiler made the last time
//! copied to its `-o`, and no compiler runs. Invariant: the cache never changes what the
//! compile does — a command it cannot account for (no single source and output, a
//! depfile or temp files of its own, a response file) runs the real compiler untouched,
//! a failed compile is never kept, and a cache that cannot be used costs a compiler run,
//! never the compile.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::cache::{Dep, Kind, Lookup, Store};
use crate::key::{key_name, normalize, Files, KeyHasher};

/// Bump when what a `compiled` key covers changes.
const SCHEMA: &str = "compiled-1";

/// Variables the compilers read that change what they make: in the key.
const KEYED_ENV: &[&str] = &[
    "CPATH",
    "C_INCLUDE_PATH",
    "CPLUS_INCLUDE_PATH",
    "OBJC_INCLUDE_PATH",
    "LIBRARY_PATH",
    "GCC_EXEC_PREFIX",
    "COMPILER_PATH",
    "SOURCE_DATE_EPOCH",
    "CCC_OVERRIDE_OPTIONS",
];

/// Variables that make the compiler write a depfile of its own: such a compile is not
/// cached.
const OWN_DEPFILE_ENV: &[&str] = &["DEPENDENCIES_OUTPUT", "SUNPRO_DEPENDENCIES"];

/// Source files, by extension: a cached compile has exactly one.
const SOURCE_EXT: &[&str] = &["c", "cc", "cpp", "cxx", "c++", "C", "cp", "CPP", "i", "ii"];

/// Options whose value is the next argument.
const TAKES_VALUE: &[&str] = &[
    "-I",
    "-D",
    "-U",
    "-include",
    "-imacros",
    "-isystem",
    "-iquote",
    "-idirafter",
    "-iprefix",
    "-iwithprefix",
    "-iwithprefixbefore",
    "-isysroot",
    "--sysroot",
    "-L",
    "-l",
    "-Xlinker",
    "-Xassembler",
    "-Xpreprocessor",
    "-Xclang",
    "-T",
    "-u",
    "-z",
    "-e",
    "--param",
    "-target",
    "-arch",
];

/// Options that make a compile write files besides `-o` (a depfile, temp files, a
/// profile), read files its depfile does not list, or print instead of compiling: such a
/// command runs as it is. Exact names, then prefixes (`-M` is every dependency option).
const NOT_CACHED: &[&str] = &[
    "-E",
    "-v",
    "--version",
    "--help",
    "-###",
    "--coverage",
    "-ftest-coverage",
    "-gsplit-dwarf",
    "-fsyntax-only",
    "-fstack-usage",
];
const NOT_CACHED_PREFIX: &[&str] = &[
    "-M",
    "-x",
    "-B",
    "-save-temps",
    "-fprofile",
    "-fauto-profile",
    "-fdump-",
    "-fplugin",
    "-specs",
    "-print-",
    "-dump",
    "-ftime-trace",
    "-fcallgraph-info",
];

/// What `scenerun cc` is told by its shim (`write_shims`): the hidden command's
/// arguments, as clap parses them.
#[derive(Debug, Clone, clap::Args)]
pub struct Call {
    /// The cache directory.
    #[arg(long = "cc-cache", value_name = "DIR")]
    pub cache: PathBuf,
    /// The manifest's directory: dependency paths inside it are recorded relative to it.
    #[arg(long = "cc-base", value_name = "DIR")]
    pub base: PathBuf,
    /// The compiler the shim stands for, as found on `PATH` (not resolved further: a
    /// driver may choose its mode by its name).
    #[arg(long = "cc-real", value_name = "PATH")]
    pub real: PathBuf,
    /// What `<compiler> --version` printed, hashed: run once by `scenerun device`
    /// before the lock (`write_shims`), not by every compile inside it.
    #[arg(long = "cc-identity", value_name = "HASH")]
    pub identity: String,
    /// Where each compile appends one line: `hit`, `built`, `ran` (not cached) and why.
    #[arg(long = "cc-log", value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// `cache.verify_key` (`ed25519:<base64>`): an entry it did not sign is a miss. No
    /// signing key comes with it (none is ever handed to a lane): what this process
    /// keeps is published unsigned, and `scenerun device` signs it when the run ends
    /// (`sign_kept`).
    #[arg(long = "cc-verify-key", value_name = "KEY")]
    pub verify_key: Option<String>,
    /// The compiler's own arguments (after `--`).
    #[arg(last = true, allow_hyphen_values = true)]
    pub args: Vec<OsString>,
}

/// A command the cache can account for.
#[derive(Debug, PartialEq)]
struct Cacheable {
    /// The index in `args` of the output path (`-o PATH`), or of `-oPATH` (`joined`).
    out_at: usize,
    joined: bool,
    out: PathBuf,
    source: PathBuf,
    /// Other operands (objects, archives, linker scripts): hashed into the key.
    inputs: Vec<PathBuf>,
    /// Compiles and links (no `-c`, `-S`): the output is executable, as the linker makes it.
    links: bool,
}

/// What the command is, decided from its arguments alone; None: run it untouched.
fn shape(args: &[OsString]) -> Option<Cacheable> {
    let args: Vec<&str> = args.iter().map(|a| a.to_str()).collect::<Option<_>>()?;
    let (mut out, mut source, mut inputs, mut links) = (None, None, Vec::new(), true);
    let mut i = 0;
    while i < args.len() {
        let a = args[i];
        if a == "-o" {
            let path = args.get(i + 1)?;
            if out.replace((i + 1, false, PathBuf::from(path))).is_some() {
                return None;
            }
            i += 2;
            continue;
        }
        if let Some(path) = a.strip_prefix("-o").filter(|p| !p.is_empty()) {
            if out.replace((i, true, PathBuf::from(path))).is_some() {
                return None;
            }
        } else if a == "-"
            || a.starts_with('@')
            || NOT_CACHED.contains(&a)
            || NOT_CACHED_PREFIX.iter().any(|n| a.starts_with(n))
            || (a.starts_with("-Wl,") && a.contains("Map"))
        {
            return None;
        } else if TAKES_VALUE.contains(&a) {
            args.get(i + 1)?;
            i += 1;
        } else if a == "-c" || a == "-S" {
            links = false;
        } else if !a.starts_with('-') {
            let p = PathBuf::from(a);
            let is_source = p
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| SOURCE_EXT.contains(&e));
            if is_source {
                if source.replace(p).is_some() {
                    return None;
                }
            } else {
                inputs.push(p);
            }
        }
        i += 1;
    }
    let (out_at, joined, out) = out?;
    Some(Cacheable {
        out_at,
        joined,
        out,
        source: source?,
        inputs,
        links,
    })
}

/// Run the compile `call` stands for, through the cache when it can; the compiler's exit
/// status (128 + signal when a signal ended it; 127 when it could not be started).
pub fn run(call: &Call) -> i32 {
    let shape = shape(&call.args).filter(|_| {
        OWN_DEPFILE_ENV
            .iter()
            .all(|v| std::env::var_os(v).is_none())
    });
    let Some(c) = shape else {
        note(call, "ran", "not a command the cache keeps", 0.0, None);
        return exec_real(call);
    };
    match cached(call, &c) {
        Ok(code) => code,
        Err(why) => {
            // Nothing ran yet: the compile happens as if there were no cache.
            note(
                call,
                "ran",
                &format!("the cache cannot be used: {why:#}"),
                0.0,
                None,
            );
            exec_real(call)
        }
    }
}

/// Replace this process with the real compiler, arguments untouched.
fn exec_real(call: &Call) -> i32 {
    let e = Command::new(&call.real).args(&call.args).exec();
    eprintln!("scenerun cc: cannot run {}: {e}", call.real.display());
    127
}

/// One line in the log the device run reads (`Tally::of_run`); `key`: the entry a
/// `built` compile published.
fn note(call: &Call, what: &str, why: &str, secs: f64, key: Option<&str>) {
    let Some(log) = &call.log else { return };
    let source = shape(&call.args).map(|c| c.source.display().to_string());
    let line = serde_json::json!({"compile": what, "source": source, "why": why, "secs": secs, "key": key});
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(log)
    {
        let _ = writeln!(f, "{line}");
    }
}

/// Serve the compile from the cache, or run it with a depfile and keep what it made.
/// Err: the cache could not be used and no compiler has run.
fn cached(call: &Call, c: &Cacheable) -> anyhow::Result<i32> {
    let keys = crate::cache::sign::Keys::of(
        call.verify_key
            .as_deref()
            .map(crate::manifest::remote::parse_ed25519)
            .transpose()?,
        None,
    )?;
    let store = Store::at(call.cache.clone()).with_keys(keys);
    store.ensure()?;
    let files = Files::new(None);
    let cwd = std::env::current_dir()?;
    let key = key_of(call, c, &cwd, &files)?;
    if let Lookup::Hit(e) = store.lookup(Kind::Compiled, &key, &call.base, &files) {
        // Marked used, as a warm marks its hits: `cache prune` evicts by last use.
        store.touch(&e);
        return serve(call, c, &cwd, &e.out());
    }
    // One build per key at a time: a second lane compiling the same kernel waits, then hits.
    let _lock = store.lock_key(Kind::Compiled, &key)?;
    if let Lookup::Hit(e) = store.lookup(Kind::Compiled, &key, &call.base, &files) {
        store.touch(&e);
        return serve(call, c, &cwd, &e.out());
    }
    let staging = store.stage(Kind::Compiled)?;
    let out = staging.out();
    let result = out.join("result");
    let depfile = staging.dir.join("deps.d");
    let mut args = call.args.clone();
    args[c.out_at] = match c.joined {
        true => {
            let mut joined = OsString::from("-o");
            joined.push(&result);
            joined
        }
        false => result.clone().into_os_string(),
    };
    args.extend(["-MD".into(), "-MF".into(), depfile.clone().into_os_string()]);
    // "Now" by the clock files are stamped with: the staging dir was just made. A file
    // the compile read that changed after this was changed during the compile.
    let started = crate::fsutil::file_clock_at(&out);
    let t0 = Instant::now();
    let ran = Command::new(&call.real)
        .args(&args)
        .stdin(Stdio::null())
        .output();
    let secs = t0.elapsed().as_secs_f64();
    let ran = match ran {
        Ok(r) => r,
        Err(e) => {
            eprintln!("scenerun cc: cannot run {}: {e}", call.real.display());
            return Ok(127);
        }
    };
    let _ = std::io::stdout().write_all(&ran.stdout);
    let _ = std::io::stderr().write_all(&ran.stderr);
    if !ran.status.success() || !result.is_file() {
        // Never kept: the next run compiles again, as the compiler alone would.
        note(call, "ran", "the compile failed", secs, None);
        return Ok(status_code(ran.status));
    }
    for (name, bytes) in [("stdout", &ran.stdout), ("stderr", &ran.stderr)] {
        if !bytes.is_empty() {
            std::fs::write(out.join(name), bytes)?;
        }
    }
    let kept = match deps_of(call, &depfile, &staging.dir, &files, started) {
        Ok(deps) => {
            let built_by = format!("compiled/{}", key_name(&call.base, &cwd.join(&c.source)));
            store
                .publish(staging, Kind::Compiled, &key, &built_by, secs, deps)
                .map(|e| e.out())
        }
        Err(why) => Err(why),
    };
    match kept {
        Ok(entry_out) => place(c, &cwd, &entry_out.join("result"))?,
        Err(why) => {
            // Compiled, not kept: the compile still stands.
            note(call, "ran", &format!("not kept: {why:#}"), secs, None);
            place(c, &cwd, &result)?;
            return Ok(0);
        }
    }
    note(call, "built", "", secs, Some(&key));
    Ok(0)
}

/// A hit: the kept output at the command's `-o`, its messages printed again.
fn serve(call: &Call, c: &Cacheable, cwd: &Path, out: &Path) -> anyhow::Result<i32> {
    place(c, cwd, &out.join("result"))?;
    let _ = std::io::stdout().write_all(&std::fs::read(out.join("stdout")).unwrap_or_default());
    let _ = std::io::stderr().write_all(&std::fs::read(out.join("stderr")).unwrap_or_default());
    note(call, "hit", "", 0.0, None);
    Ok(0)
}

/// The key: the compiler (its path and its identity), the arguments with the
/// output masked, the working directory, the source and the other inputs by content,
/// and the variables compilers read. The headers are not in it: the depfile of the
/// compile that made the entry lists them, and a hit re-checks each.
fn key_of(call: &Call, c: &Cacheable, cwd: &Path, files: &Files) -> anyhow::Result<String> {
    let mut h = KeyHasher::new(Kind::Compiled.name());
    h.field("compiled-schema", SCHEMA.as_bytes());
    h.field("compiler", call.real.as_os_str().as_encoded_bytes());
    h.field("identity", call.identity.as_bytes());
    h.field("cwd", cwd.as_os_str().as_encoded_bytes());
    for (i, a) in call.args.iter().enumerate() {
        let masked: &[u8] = match (i == c.out_at, c.joined) {
            (true, true) => b"-o{out}",
            (true, false) => b"{out}",
            _ => a.as_encoded_bytes(),
        };
        h.field("arg", masked);
    }
    for (tag, p) in
        std::iter::once(("source", &c.source)).chain(c.inputs.iter().map(|p| ("input", p)))
    {
        let path = normalize(&cwd.join(p));
        anyhow::ensure!(
            std::fs::metadata(&path).is_ok_and(|m| m.is_file()),
            "{} is not a regular file",
            path.display()
        );
        h.file(tag, &p.to_string_lossy(), &files.hash(&path)?);
    }
    let env: BTreeMap<String, String> = KEYED_ENV
        .iter()
        .filter_map(|v| std::env::var(v).ok().map(|x| (v.to_string(), x)))
        .collect();
    h.env(&env);
    Ok(h.finish())
}

/// What the compile read, from its depfile (`depfile::recorded`): each a regular file,
/// none changed since the compile started (then what it made is not what the record
/// would name).
fn deps_of(
    call: &Call,
    depfile: &Path,
    staging: &Path,
    files: &Files,
    started: i128,
) -> anyhow::Result<Vec<Dep>> {
    let text = crate::fsutil::read_capped(depfile, crate::fsutil::Cap::DEPFILE)?;
    // The compiler wrote its paths relative to its own directory; the record names them
    // relative to the manifest's (what a hit resolves them against).
    let cwd = std::env::current_dir()?;
    let paths = crate::warm::depfile::parse(&String::from_utf8_lossy(&text))
        .into_iter()
        .map(|p| cwd.join(p).to_string_lossy().into_owned())
        .collect();
    crate::warm::depfile::recorded(paths, &call.base, staging, |path| {
        if !std::fs::metadata(path)?.is_file() {
            return Err(std::io::Error::other("not a regular file"));
        }
        if crate::fsutil::changed_since(path, started) {
            return Err(std::io::Error::other("changed while it was compiled"));
        }
        files.hash(path)
    })
    .map_err(|(p, e)| anyhow::anyhow!("{p}: {e}"))
}

/// Copy `from` to the command's output: written beside it and renamed over it (as a
/// linker replaces its output, so a process that has the old file mapped keeps it),
/// with the mode the compiler would have given it.
fn place(c: &Cacheable, cwd: &Path, from: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let to = cwd.join(&c.out);
    let dir = to.parent().unwrap_or(cwd);
    let name = to
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.scenerun-{}", crate::fsutil::unique()));
    let copied = (|| {
        let mut src = std::fs::File::open(from)?;
        let mut dst = std::fs::File::options()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        std::io::copy(&mut src, &mut dst)?;
        let mode = if c.links { 0o777 } else { 0o666 } & !umask();
        dst.set_permissions(std::fs::Permissions::from_mode(mode))?;
        std::fs::rename(&tmp, &to)
    })();
    if copied.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    Ok(copied?)
}

/// This process's umask (read by setting it and setting it back: one thread here).
fn umask() -> u32 {
    // SAFETY: umask only swaps the process's file mode mask; `scenerun cc` has no other
    // thread that creates files meanwhile.
    unsafe {
        let old = libc::umask(0o022);
        libc::umask(old);
        old as u32
    }
}

fn status_code(s: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
}

/// The directory of a device run's compiler shims.
pub fn shim_dir(run_dir: &Path) -> PathBuf {
    run_dir.join("bin")
}

/// Where the shims of a device run log each compile.
pub fn log_path(run_dir: &Path) -> PathBuf {
    run_dir.join("compiles.jsonl")
}

/// Put the run's shims first on the `PATH` of `env` (a lane's or a device step's, the
/// manifest's env under it): before the `PATH` it sets, else this process's. Nothing
/// without `compile_cache:`.
pub fn put_shims_first(
    manifest: &crate::manifest::Manifest,
    run_dir: &Path,
    env: &mut BTreeMap<String, String>,
) {
    if manifest.compile_cache.is_empty() {
        return;
    }
    let rest = env
        .get("PATH")
        .cloned()
        .unwrap_or_else(|| inherited_path(manifest));
    let shims = shim_dir(run_dir).display().to_string();
    let path = match rest.is_empty() {
        true => shims,
        false => format!("{shims}:{rest}"),
    };
    env.insert("PATH".into(), path);
}

fn inherited_path(manifest: &crate::manifest::Manifest) -> String {
    manifest
        .env
        .get("PATH")
        .cloned()
        .or_else(|| std::env::var("PATH").ok())
        .unwrap_or_default()
}

/// Write a shim for each of `compile_cache.compilers` into the run's `bin/`: a script
/// that hands its arguments to `scenerun cc` with the compiler it found on `PATH` and
/// that compiler's identity (`<compiler> --version`, run here once through `identity`,
/// before the lock). The compilers left without a shim, with why: not on `PATH` (a test
/// that runs one fails as it would without scenerun), or no identity (its compiles run
/// without the cache).
pub fn write_shims(
    manifest: &crate::manifest::Manifest,
    store: &Store,
    run_dir: &Path,
) -> anyhow::Result<Vec<(String, String)>> {
    use std::os::unix::fs::PermissionsExt;
    if manifest.compile_cache.is_empty() {
        return Ok(Vec::new());
    }
    let q = |p: &Path| crate::template::quote(&p.to_string_lossy()).into_owned();
    let dir = shim_dir(run_dir);
    let infra = |e: std::io::Error, p: &Path| {
        crate::error::infra(format!("cannot write the compiler shim {}", p.display()), e)
    };
    std::fs::create_dir_all(&dir).map_err(|e| infra(e, &dir))?;
    let me = std::env::current_exe().map_err(|e| infra(e, &dir))?;
    let path = inherited_path(manifest);
    let mut missing = Vec::new();
    for name in &manifest.compile_cache {
        let Some(real) = find_on(&path, name) else {
            missing.push((name.clone(), "is not on PATH".into()));
            continue;
        };
        let version = format!("{} --version", q(&real));
        let timeout = crate::identity::DEFAULT_TIMEOUT;
        let identity = match crate::identity::run(&version, &manifest.dir, &manifest.env, timeout) {
            Ok(out) => blake3::hash(&out).to_hex().to_string(),
            Err(e) => {
                missing.push((name.clone(), format!("has no identity ({e})")));
                continue;
            }
        };
        let mut line = format!(
            "exec {} cc --cc-cache {} --cc-base {} --cc-real {} --cc-identity {identity} --cc-log {}",
            q(&me),
            q(&store.root),
            q(&manifest.dir),
            q(&real),
            q(&log_path(run_dir)),
        );
        if let Some(k) = manifest.cache.verify_key {
            let text = crate::manifest::remote::ed25519_text(&k);
            line.push_str(&format!(
                " --cc-verify-key {}",
                crate::template::quote(&text)
            ));
        }
        let shim = dir.join(name);
        std::fs::write(&shim, format!("#!/bin/sh\n{line} -- \"$@\"\n"))
            .and_then(|()| std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)))
            .map_err(|e| infra(e, &shim))?;
    }
    Ok(missing)
}

/// The first executable regular file named `name` in the directories of `path`.
fn find_on(path: &str, name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// How the compiles of a device run went, from its log: served from the cache, built
/// and kept, run without the cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Tally {
    pub hit: usize,
    pub built: usize,
    pub ran: usize,
}

/// A device run's compile log, read once when the run ends: its tally, and the entries
/// its compiles published.
pub struct RunLog {
    pub tally: Tally,
    built: Vec<String>,
}

impl RunLog {
    /// Read the run's log (a missing one: no compile).
    pub fn read(run_dir: &Path) -> RunLog {
        let mut log = RunLog {
            tally: Tally::default(),
            built: Vec::new(),
        };
        let text = crate::fsutil::read_capped(&log_path(run_dir), crate::fsutil::Cap::DEVICE_RUN)
            .unwrap_or_default();
        for line in String::from_utf8_lossy(&text).lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
            match v["compile"].as_str() {
                Some("hit") => log.tally.hit += 1,
                Some("built") => {
                    log.tally.built += 1;
                    log.built.extend(v["key"].as_str().map(str::to_string));
                }
                Some("ran") => log.tally.ran += 1,
                _ => {}
            }
        }
        log
    }

    /// Sign what the run's compiles kept, when this process holds the signing key (a
    /// lane never does): without it, under `cache.verify_key` they are misses, and each
    /// compiles again. How many were signed.
    pub fn sign_kept(&self, store: &Store) -> usize {
        self.built
            .iter()
            .filter(|k| store.sign_unsigned(Kind::Compiled, k).unwrap_or(false))
            .count()
    }
}

impl Tally {
    pub fn any(&self) -> bool {
        self.hit + self.built + self.ran > 0
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "compiles the tests started: {} from the cache, {} compiled and kept, {} ran without the cache",
            self.hit, self.built, self.ran
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<OsString> {
        line.split_whitespace().map(OsString::from).collect()
    }

    #[test]
    fn a_single_source_compile_with_one_output_is_cached() {
        let c = shape(&args("-shared -O2 -fPIC -Iinc -D X=1 -o /tmp/k.so k.cpp")).unwrap();
        assert_eq!(c.out, PathBuf::from("/tmp/k.so"));
        assert_eq!(c.out_at, 7);
        assert!(!c.joined);
        assert_eq!(c.source, PathBuf::from("k.cpp"));
        assert!(c.links);
        let c = shape(&args("-c -o/tmp/k.o k.c lib.a")).unwrap();
        assert!(c.joined && !c.links);
        assert_eq!((c.out_at, c.out), (1, PathBuf::from("/tmp/k.o")));
        assert_eq!(c.inputs, vec![PathBuf::from("lib.a")]);
        // A value that looks like a source, after an option that takes one, is not one.
        let c = shape(&args("-include pre.h -o k.so k.cc")).unwrap();
        assert_eq!(c.source, PathBuf::from("k.cc"));
    }

    #[test]
    fn what_the_cache_cannot_account_for_runs_untouched() {
        for line in [
            "--version",
            "-o k.so",
            "a.o b.o -o prog",
            "-o k.so a.cpp b.cpp",
            "-o a -o b k.c",
            "-E k.c -o k.i",
            "-MD -MF k.d -c k.c -o k.o",
            "-MMD -c k.c -o k.o",
            "-x c++ -c k.h -o k.o",
            "-save-temps -c k.c -o k.o",
            "-fprofile-generate -c k.c -o k.o",
            "--coverage -c k.c -o k.o",
            "-gsplit-dwarf -c k.c -o k.o",
            "@args.rsp",
            "-c - -o k.o",
            "-B/opt/bin -c k.c -o k.o",
            "-Wl,-Map=k.map k.c -o k",
            "-c k.c -o",
        ] {
            assert_eq!(shape(&args(line)), None, "{line}");
        }
    }
}
