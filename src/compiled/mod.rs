//! The compiles a suite's tests start in their own bodies (a plain test function that
//! builds its kernel before it runs it) go through the cache as `compiled` entries
//! (docs/compile-cache.md). Invariant: the cache changes nothing a compile does. A hit
//! is served only where the real compile would give the same bytes: the compiler by
//! content and `--version`, the command, every operand, every file the preprocessor and
//! the linker read, every place a header or library would have been found before
//! (`reads`), the variables the compiler reads. Anything the cache cannot prove runs the
//! real compiler untouched and is counted with why (`command::Why`); a failed compile is
//! never kept; outputs are written as the compiler writes them (through a link or a
//! device, never renamed over one).

mod command;
mod reads;
mod shim;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::cache::{Dep, Kind, Lookup, Store};
use crate::key::{key_name, normalize, Files, KeyHasher};
use command::{Lang, Shape, Why};
pub use shim::{log_path, shim_dir, write_shims};

/// Bump when what a `compiled` key covers changes.
const SCHEMA: &str = "compiled-2";

/// Variables the compiler driver, preprocessor, assembler or linker read that change
/// what they make or print: in the key. (`TMPDIR` is not: temporary names never reach
/// an output. `PATH` is keyed by what it resolves: the compiler, `as` and `ld`.)
const KEYED_ENV: &[&str] = &[
    "CPATH",
    "C_INCLUDE_PATH",
    "CPLUS_INCLUDE_PATH",
    "OBJC_INCLUDE_PATH",
    "LIBRARY_PATH",
    "GCC_EXEC_PREFIX",
    "COMPILER_PATH",
    "SOURCE_DATE_EPOCH",
    "GCC_COMPARE_DEBUG",
    "LD_RUN_PATH",
    "LD_LIBRARY_PATH",
    "CCC_OVERRIDE_OPTIONS",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "GCC_COLORS",
    "GCC_URLS",
    "TERM_URLS",
    "TERM",
    "COLUMNS",
];

/// Variables that make the compiler write a depfile of its own.
const OWN_DEPFILE_ENV: &[&str] = &["DEPENDENCIES_OUTPUT", "SUNPRO_DEPENDENCIES"];

/// The programs the driver finds on `PATH` when its own directories lack them: keyed
/// by the file `PATH` resolves them to.
const TOOLS_ON_PATH: &[&str] = &["as", "ld"];

/// What `scenerun cc` is told by its shim (`write_shims`): the hidden command's
/// arguments, as clap parses them.
#[derive(Debug, Clone, clap::Args)]
pub struct Call {
    /// The compiler's name: the shim's, looked up on `PATH` without the shims.
    #[arg(long = "cc-name", value_name = "NAME")]
    pub name: String,
    /// The cache directory.
    #[arg(long = "cc-cache", value_name = "DIR")]
    pub cache: PathBuf,
    /// The manifest's directory: paths inside it are keyed and recorded relative to it.
    #[arg(long = "cc-base", value_name = "DIR")]
    pub base: PathBuf,
    /// The run's shim directory: left out of `PATH` when the compiler is looked up, and
    /// where the identity table is.
    #[arg(long = "cc-shims", value_name = "DIR")]
    pub shims: PathBuf,
    /// Where each compile appends one line: `hit`, `built`, `ran` (not cached) and why.
    #[arg(long = "cc-log", value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// `signing.verify_key` when local entries are verified (`ed25519:<base64>`): an
    /// entry it did not sign is a miss. No
    /// signing key comes with it (none is ever handed to a lane): what this process
    /// keeps is published unsigned, and `scenerun device` signs it when the run ends, on
    /// the word this process gives over `report`.
    #[arg(long = "cc-verify-key", value_name = "KEY")]
    pub verify_key: Option<String>,
    /// The device run's socket (`cache::witness`): told each entry this compile
    /// publishes, the only word the run signs compiled entries on.
    #[arg(long = "cc-report", value_name = "SOCKET")]
    pub report: Option<PathBuf>,
    /// The compiler's own arguments (after `--`).
    #[arg(last = true, allow_hyphen_values = true)]
    pub args: Vec<OsString>,
}

/// How one compile went, as the run's log records it.
enum Outcome {
    Hit,
    Built(String),
    Ran(Why),
}

/// One compile: the call, the real compiler it stands for, where it runs, and the
/// environment the compiler gets (the caller's, `PATH` without the shims).
struct Compile<'a> {
    call: &'a Call,
    real: PathBuf,
    cwd: PathBuf,
    path: String,
    started: Instant,
}

/// Run the compile `call` stands for, through the cache when it can; the compiler's exit
/// status (128 + signal when a signal ended it; 127 when it could not be started).
pub fn run(call: &Call) -> i32 {
    let started = Instant::now();
    let path = shim::without_shims(&std::env::var("PATH").unwrap_or_default(), &call.shims);
    let Some(real) = shim::find_on(&path, &call.name) else {
        eprintln!("scenerun cc: {}: not found on PATH", call.name);
        return 127;
    };
    let Ok(cwd) = std::env::current_dir() else {
        eprintln!("scenerun cc: the working directory is gone");
        return 127;
    };
    let c = Compile {
        call,
        real,
        cwd,
        path,
        started,
    };
    let shape = command::shape(&call.args, &c.cwd);
    let done = shape.and_then(|s| c.cached(&s));
    match done {
        Ok((code, outcome)) => {
            c.note(&outcome);
            code
        }
        Err(why) => {
            // Nothing ran yet: the compile happens as if there were no cache.
            c.note(&Outcome::Ran(why));
            c.run_real(&call.args)
        }
    }
}

impl Compile<'_> {
    /// The environment the compiler gets on top of this process's: `PATH` as the
    /// caller's without the shims.
    fn env(&self) -> BTreeMap<String, String> {
        BTreeMap::from([("PATH".to_string(), self.path.clone())])
    }

    /// The real compiler with `args`, its output and input this process's.
    fn run_real(&self, args: &[OsString]) -> i32 {
        match crate::base::proc::program(&self.real, args, &self.cwd, &self.env()).run() {
            Ok(o) => status_code(o.status),
            Err(e) => {
                eprintln!("scenerun cc: cannot run {}: {e}", self.real.display());
                127
            }
        }
    }

    /// One line in the log the device run reads (`RunLog::read`).
    fn note(&self, outcome: &Outcome) {
        let Some(log) = &self.call.log else { return };
        let (what, why, reason, key) = match outcome {
            Outcome::Hit => ("hit", String::new(), None, None),
            Outcome::Built(key) => ("built", String::new(), None, Some(key.as_str())),
            Outcome::Ran(why) => ("ran", why.to_string(), Some(why.reason()), None),
        };
        let line = serde_json::json!({
            "compile": what,
            "compiler": self.call.name,
            "why": why,
            "reason": reason,
            "secs": self.started.elapsed().as_secs_f64(),
            "key": key,
        });
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(log)
        {
            let _ = writeln!(f, "{line}");
        }
    }

    /// Serve the compile from the cache, or run it, learn what it read and keep what it
    /// made. Err: why the cache does not take it; no compiler has run.
    fn cached(&self, s: &Shape) -> Result<(i32, Outcome), Why> {
        if let Some(v) = OWN_DEPFILE_ENV
            .iter()
            .find(|v| std::env::var_os(v).is_some())
        {
            return Err(Why::Env(v));
        }
        // The compiler's messages differ on a terminal (colours, links).
        // SAFETY: isatty only reads the state of a descriptor.
        if unsafe { libc::isatty(1) == 1 || libc::isatty(2) == 1 } {
            return Err(Why::Terminal);
        }
        let asm: Vec<PathBuf> = s
            .units
            .iter()
            .filter(|(_, l)| *l == Lang::Asm)
            .map(|(p, _)| self.cwd.join(p))
            .collect();
        if let Some(p) = reads::assembler_reads(&asm) {
            return Err(Why::Operand(p.display().to_string()));
        }
        // The compiler would fail to write there, with its own message.
        let parent = self.cwd.join(&s.out);
        if !parent.parent().is_some_and(Path::is_dir) {
            return Err(Why::NoOutputDir);
        }
        let ids = shim::table_of(&self.call.shims);
        let Some(identity) = ids.get(&shim::identity_name(&self.call.name, &self.real)) else {
            return Err(Why::NotIdentified {
                name: self.call.name.clone(),
                path: self.real.display().to_string(),
            });
        };
        // A file whose stat is as the memo recorded is not read again (as for kernels).
        let memo =
            crate::base::layout::compile_stat_memo(&crate::base::layout::job_dir(&self.call.base));
        let files = Files::new(Some(memo));
        let done = self.through_cache(s, identity, &files);
        files.save();
        done
    }

    fn through_cache(
        &self,
        s: &Shape,
        identity: &str,
        files: &Files,
    ) -> Result<(i32, Outcome), Why> {
        let unusable = |e: anyhow::Error| Why::CacheUnusable(format!("{e:#}"));
        let keys = Keys::of(self, s, identity, files).map_err(unusable)?;
        let store = self.store().map_err(unusable)?;
        let lookup = |key: &str| match store.lookup(Kind::Compiled, key, &self.call.base, files) {
            Lookup::Hit(e) => Some(e),
            _ => None,
        };
        // A hit whose kept messages read under their cap (a link, or over it: the
        // compile runs and replaces the entry).
        let found = || {
            keys.candidates()
                .iter()
                .find_map(|k| lookup(k))
                .and_then(|e| messages(&e.out()).map(|m| (e, m)))
        };
        if let Some((e, m)) = found() {
            // Marked used, as a warm marks its hits: `cache prune` evicts by last use.
            store.touch(&e);
            return self.serve(s, &e.out(), m).map_err(unusable);
        }
        // One build per key at a time: a second lane compiling the same kernel waits, then hits.
        let _lock = store
            .lock_key(Kind::Compiled, &keys.key(false, false))
            .map_err(unusable)?;
        if let Some((e, m)) = found() {
            store.touch(&e);
            return self.serve(s, &e.out(), m).map_err(unusable);
        }
        self.build(s, &store, &keys, files).map_err(unusable)
    }

    fn store(&self) -> anyhow::Result<Store> {
        let keys = crate::cache::sign::Keys::verifier(
            self.call
                .verify_key
                .as_deref()
                .map(crate::manifest::signing::parse_ed25519)
                .transpose()?,
        )?;
        let store = Store::at(self.call.cache.clone()).with_keys(keys);
        store.ensure()?;
        Ok(store)
    }

    /// A miss: the real compiler with the same arguments, its output in a staging
    /// directory, each unit's dependency output appended to one file
    /// (`SUNPRO_DEPENDENCIES`, which every unit's preprocessor appends to and which
    /// changes nothing in what it makes), the linker's own (`--dependency-file`). What
    /// it made is kept when it
    /// succeeded and everything it read is accounted for; it is placed at `-o` either way.
    fn build(
        &self,
        s: &Shape,
        store: &Store,
        keys: &Keys,
        files: &Files,
    ) -> anyhow::Result<(i32, Outcome)> {
        let staging = store.stage(Kind::Compiled)?;
        let out = staging.out();
        // Made under the output's own name: it may reach the output.
        std::fs::create_dir_all(out.join("result"))?;
        let result = out.join("result").join(&keys.name);
        let (depfile, linkfile) = (staging.dir.join("deps.d"), staging.dir.join("link.d"));
        let mut args = s.args.clone();
        args[s.out_at] = match s.joined {
            true => {
                let mut joined = OsString::from("-o");
                joined.push(&result);
                joined
            }
            false => result.clone().into_os_string(),
        };
        if s.links {
            let mut flag = OsString::from("-Wl,--dependency-file=");
            flag.push(&linkfile);
            args.push(flag);
        }
        let mut env = self.env();
        env.insert("SUNPRO_DEPENDENCIES".into(), depfile.display().to_string());
        // "Now" by the clock files are stamped with: the staging dir was just made. A file
        // the compile read that changed after this was changed during the compile.
        let started = crate::base::fsutil::file_clock_at(&out);
        let ran = crate::base::proc::program(&self.real, &args, &self.cwd, &env)
            .stdin_null()
            .stdout_capture()
            .stderr_capture()
            .run();
        let ran = match ran {
            Ok(r) => r,
            Err(e) => {
                eprintln!("scenerun cc: cannot run {}: {e}", self.real.display());
                return Ok((127, Outcome::Ran(Why::Failed)));
            }
        };
        if !ran.status.success() && s.links && contains(&ran.stderr, b"dependency-file") {
            // This linker lists nothing it read: the command runs as it is.
            let why = Why::NotKept("the linker does not write a dependency file".into());
            return Ok((self.run_real(&self.call.args), Outcome::Ran(why)));
        }
        let _ = std::io::stdout().write_all(&ran.stdout);
        let _ = std::io::stderr().write_all(&ran.stderr);
        if !ran.status.success() || !result.is_file() {
            // Never kept: the next run compiles again, as the compiler alone would.
            return Ok((status_code(ran.status), Outcome::Ran(Why::Failed)));
        }
        // What the compiler made stands from here on, kept or not.
        self.place(s, &result)?;
        let kept = (|| {
            for (name, bytes) in [("stdout", &ran.stdout), ("stderr", &ran.stderr)] {
                if !bytes.is_empty() {
                    std::fs::write(out.join(name), bytes)?;
                }
            }
            let deps = self.deps_of(s, &depfile, &linkfile, &staging.dir, files, started)?;
            // An output or message naming this checkout is kept for this checkout only;
            // one naming its output file (a shared library's version definition) for
            // that name only; one naming the staging directory not at all.
            let made = std::fs::read(&result)?;
            let names = |what: &[u8]| {
                [&ran.stdout, &ran.stderr, &made]
                    .iter()
                    .any(|b| contains(b, what))
            };
            anyhow::ensure!(
                !names(staging.dir.as_os_str().as_encoded_bytes()),
                "the output names the path it was written to"
            );
            let key = keys.key(
                names(self.call.base.as_os_str().as_encoded_bytes()),
                names(keys.name.as_bytes()),
            );
            let unit = self.cwd.join(&s.units[0].0);
            let built_by = format!("compiled/{}", key_name(&self.call.base, &unit));
            let secs = self.started.elapsed().as_secs_f64();
            let e = store.publish(staging, Kind::Compiled, &key, &built_by, secs, deps)?;
            // Told to the run (never through a file a step can write): what it may sign
            // when the run ends. Not told, it is never signed.
            if let Some(socket) = &self.call.report {
                let _ = crate::cache::witness::tell(socket, &key, &e.meta.files);
            }
            anyhow::Ok(key)
        })();
        Ok(match kept {
            Ok(key) => (0, Outcome::Built(key)),
            // Compiled, not kept: the compile still stands.
            Err(why) => (0, Outcome::Ran(Why::NotKept(format!("{why:#}")))),
        })
    }

    /// What the compile read (each unit's preprocessor output, the linker's), each a
    /// regular file unchanged since the compile started, and the places a header or
    /// library would have been found before one it read, as absent.
    fn deps_of(
        &self,
        s: &Shape,
        depfile: &Path,
        linkfile: &Path,
        staging: &Path,
        files: &Files,
        started: i128,
    ) -> anyhow::Result<Vec<Dep>> {
        let parse = |p: &Path| -> anyhow::Result<Vec<PathBuf>> {
            let text = match crate::base::fsutil::read_capped(p, crate::base::fsutil::Cap::DEPFILE)
            {
                Ok(t) => t,
                Err(_) if !p.exists() => return Ok(Vec::new()),
                Err(e) => return Err(e.into()),
            };
            Ok(crate::warm::depfile::parse(&String::from_utf8_lossy(&text))
                .into_iter()
                .map(|d| normalize(&self.cwd.join(d)))
                .filter(|d| !d.starts_with(staging))
                .collect())
        };
        let headers = parse(depfile)?;
        let temporary = |p: &PathBuf| driver_temporary(p, s, &self.cwd);
        let linked: Vec<PathBuf> = match s.links {
            true => parse(linkfile)?
                .into_iter()
                .filter(|p| !temporary(p))
                .collect(),
            false => Vec::new(),
        };
        anyhow::ensure!(
            !s.links || linkfile.exists(),
            "the linker wrote no dependency file"
        );
        let units: Vec<PathBuf> = s
            .units
            .iter()
            .map(|(p, _)| normalize(&self.cwd.join(p)))
            .collect();
        let scanned: Vec<PathBuf> = units.iter().chain(&headers).cloned().collect();
        if let Some(p) = reads::assembler_reads(&scanned) {
            anyhow::bail!(
                "{} has .incbin or .include: what the assembler reads is in no depfile",
                p.display()
            );
        }
        let mut sp = reads::SearchPath::default();
        let mut langs: Vec<Lang> = s.units.iter().map(|(_, l)| *l).collect();
        langs.dedup();
        for lang in langs {
            let more = self.search_path(s, lang)?;
            for (to, from) in [(&mut sp.quote, more.quote), (&mut sp.angle, more.angle)] {
                for d in from {
                    if !to.contains(&d) {
                        to.push(d);
                    }
                }
            }
        }
        let libs: Vec<PathBuf> = linked
            .iter()
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("lib"))
            })
            .cloned()
            .collect();
        let absent = reads::absent(&scanned, &sp, &libs, &reads::lib_dirs(&s.args, &self.cwd));
        let mut read: Vec<String> = Vec::new();
        for p in headers.iter().chain(&linked) {
            let p = p.to_string_lossy().into_owned();
            if !read.contains(&p) {
                read.push(p);
            }
        }
        let mut deps = crate::warm::depfile::recorded(read, &self.call.base, staging, |path| {
            if !std::fs::metadata(path)?.is_file() {
                return Err(std::io::Error::other("not a regular file"));
            }
            if crate::base::fsutil::changed_since(path, started) {
                return Err(std::io::Error::other("changed while it was compiled"));
            }
            files.hash(path)
        })
        .map_err(|(p, e)| anyhow::anyhow!("{p}: {e}"))?;
        deps.extend(absent.iter().map(|p| Dep {
            path: key_name(&self.call.base, p).into(),
            blake3: crate::cache::ABSENT.into(),
        }));
        Ok(deps)
    }

    /// The directories the preprocessor searches for this command and language, as
    /// the compiler prints them (one more run of it, on an empty input, on a miss only).
    fn search_path(&self, s: &Shape, lang: Lang) -> anyhow::Result<reads::SearchPath> {
        let args = reads::probe_args(s, lang);
        let ran = crate::base::proc::program(&self.real, &args, &self.cwd, &self.env())
            .stdin_null()
            .stdout_null()
            .stderr_capture()
            .run()?;
        anyhow::ensure!(
            ran.status.success(),
            "the compiler did not print its search path"
        );
        Ok(reads::search_path(
            &String::from_utf8_lossy(&ran.stderr),
            &self.cwd,
        ))
    }

    /// A hit: the kept output at the command's `-o`, its messages printed again.
    fn serve(
        &self,
        s: &Shape,
        out: &Path,
        [stdout, stderr]: [Vec<u8>; 2],
    ) -> anyhow::Result<(i32, Outcome)> {
        let made = std::fs::read_dir(out.join("result"))?
            .next()
            .ok_or_else(|| anyhow::anyhow!("the entry holds no output"))??;
        self.place(s, &made.path())?;
        let _ = std::io::stdout().write_all(&stdout);
        let _ = std::io::stderr().write_all(&stderr);
        Ok((0, Outcome::Hit))
    }

    /// Copy `from` to the command's output as the compiler writes it: a link or any
    /// other file that is not a regular file (`/dev/null`) is written through, never
    /// replaced; a regular file is written in place by a compile (`-c`, `-S`: the
    /// assembler truncates it) and replaced by a link (the linker unlinks it first, so a
    /// process that has the old file mapped keeps it); a link's output gets the mode the
    /// linker gives it.
    fn place(&self, s: &Shape, from: &Path) -> anyhow::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let to = self.cwd.join(&s.out);
        let now = std::fs::symlink_metadata(&to).ok();
        let regular = now.as_ref().is_some_and(|m| m.file_type().is_file());
        let mode = if s.links { 0o777 } else { 0o666 } & !umask();
        if now.is_some() && (!regular || !s.links) {
            let mut src = std::fs::File::open(from)?;
            let mut dst = std::fs::File::options()
                .write(true)
                .truncate(true)
                .open(&to)?;
            std::io::copy(&mut src, &mut dst)?;
            let m = dst.metadata()?;
            if s.links && m.is_file() {
                // As the linker marks its output executable wherever it can be read.
                let old = m.permissions().mode() & 0o7777;
                dst.set_permissions(std::fs::Permissions::from_mode(
                    (old | (old & 0o444) >> 2) & !umask(),
                ))?;
            }
            return Ok(());
        }
        let dir = to.parent().unwrap_or(&self.cwd);
        let name = to
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default();
        let tmp = dir.join(format!(
            ".{name}.scenerun-{}",
            crate::base::fsutil::unique()
        ));
        let copied = (|| {
            let mut src = std::fs::File::open(from)?;
            let mut dst = std::fs::File::options()
                .write(true)
                .create_new(true)
                .open(&tmp)?;
            std::io::copy(&mut src, &mut dst)?;
            dst.set_permissions(std::fs::Permissions::from_mode(mode))?;
            std::fs::rename(&tmp, &to)
        })();
        if copied.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        Ok(copied?)
    }
}

/// The keys of a compile: the fields every one has, then with or without the
/// checkout's path (`base`) and the output's file name (`name`), each added where the
/// command or what it made names it.
struct Keys {
    common: KeyHasher,
    base: String,
    name: String,
    /// The command itself names the checkout: every key holds it.
    names_base: bool,
}

impl Keys {
    /// The compiler (its name, its file's content, what `--version` printed), `as` and
    /// `ld` as `PATH` resolves them, the arguments (response files expanded, the output
    /// masked), the working directory, every operand by content, the variables the
    /// compiler reads. Paths inside the checkout are relative to it: the checkout's own
    /// path is in the key only when the command names it (an argument, a variable) or
    /// the object will (debug information, compiled inside it and not remapped).
    fn of(c: &Compile<'_>, s: &Shape, identity: &str, files: &Files) -> anyhow::Result<Keys> {
        let base = c.call.base.to_string_lossy().into_owned();
        let maps: Vec<String> = s
            .args
            .iter()
            .filter_map(|a| prefix_map(&a.to_string_lossy()).map(str::to_string))
            .collect();
        let env: BTreeMap<String, String> = KEYED_ENV
            .iter()
            .filter_map(|v| std::env::var(v).ok().map(|x| (v.to_string(), x)))
            .collect();
        let names_base = s.args.iter().any(|a| {
            let a = a.to_string_lossy();
            prefix_map(&a).is_none() && a.contains(&base)
        }) || env.values().any(|v| v.contains(&base))
            || (s.debug
                && c.cwd.starts_with(&c.call.base)
                && !maps.iter().any(|m| c.cwd.starts_with(m)));
        let mut h = KeyHasher::new(Kind::Compiled.name());
        h.field("compiled-schema", SCHEMA.as_bytes());
        h.field("compiler", c.call.name.as_bytes());
        let real = std::fs::canonicalize(&c.real)?;
        h.field("compiler-content", files.hash(&real)?.as_bytes());
        h.field("identity", identity.as_bytes());
        for tool in TOOLS_ON_PATH {
            let found = shim::find_on(&c.path, tool).and_then(|p| std::fs::canonicalize(p).ok());
            let hash = match &found {
                Some(p) => files.hash(p)?,
                None => "none".into(),
            };
            h.field(tool, hash.as_bytes());
        }
        h.field("cwd", key_name(&c.call.base, &c.cwd).as_bytes());
        for (i, a) in s.args.iter().enumerate() {
            let text = a.to_string_lossy();
            let masked = match (i == s.out_at, s.joined) {
                (true, true) => "-o{out}".into(),
                (true, false) => "{out}".into(),
                _ if prefix_map(&text).is_some() => text.replace(&base, "{base}"),
                _ => text.into_owned(),
            };
            h.field("arg", masked.as_bytes());
        }
        let units = s.units.iter().map(|(p, _)| p);
        for p in units.chain(&s.inputs) {
            let path = normalize(&c.cwd.join(p));
            anyhow::ensure!(
                std::fs::metadata(&path).is_ok_and(|m| m.is_file()),
                "{} is not a regular file",
                path.display()
            );
            h.file("operand", &p.to_string_lossy(), &files.hash(&path)?);
        }
        h.env(&env);
        let name = s
            .out
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "result".into());
        Ok(Keys {
            common: h,
            base,
            name,
            names_base,
        })
    }

    fn key(&self, base: bool, name: bool) -> String {
        let mut h = self.common.clone();
        if base || self.names_base {
            h.field("checkout", self.base.as_bytes());
        }
        if name {
            h.field("output-name", self.name.as_bytes());
        }
        h.finish()
    }

    /// Every key an entry for this command may be under, the most shared first.
    fn candidates(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (base, name) in [(false, false), (true, false), (false, true), (true, true)] {
            let k = self.key(base, name);
            if !out.contains(&k) {
                out.push(k);
            }
        }
        out
    }
}

/// The old prefix of a `-fdebug-prefix-map=OLD=NEW` (and its `file`/`macro`/`profile`
/// kin): what it maps never reaches the output.
fn prefix_map(arg: &str) -> Option<&str> {
    let rest = [
        "-fdebug-prefix-map=",
        "-ffile-prefix-map=",
        "-fmacro-prefix-map=",
    ]
    .iter()
    .find_map(|p| arg.strip_prefix(p))?;
    rest.split_once('=').map(|(old, _)| old)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
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

pub(crate) fn inherited_path(manifest: &crate::manifest::Manifest) -> String {
    manifest
        .env
        .get("PATH")
        .cloned()
        .or_else(|| std::env::var("PATH").ok())
        .unwrap_or_default()
}

/// How the compiles of a device run went, from its log: served from the cache, built
/// and kept, run without the cache.
/// `reasons`: how many of `ran` ran so, by `Why::reason` (report.json only; the
/// terminal line stays the three counts).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Tally {
    pub hit: usize,
    pub built: usize,
    pub ran: usize,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reasons: BTreeMap<String, usize>,
}

/// A device run's compile log, read once when the run ends: its tally (nothing else:
/// any step can append to it, so what it says is counted, never signed), and how many
/// lines were not lines a shim writes (`note`).
pub struct RunLog {
    pub tally: Tally,
    pub ignored: usize,
}

impl RunLog {
    /// Read the run's log (a missing one: no compile). A line that is not one object
    /// with a known `compile`, whose `key` is not a key scenerun makes, or whose `reason`
    /// could not be one `Why::reason` writes (a short line of printable text), is ignored.
    pub fn read(run_dir: &Path) -> RunLog {
        let mut log = RunLog {
            tally: Tally::default(),
            ignored: 0,
        };
        let text = crate::base::fsutil::read_capped(
            &log_path(run_dir),
            crate::base::fsutil::Cap::DEVICE_RUN,
        )
        .unwrap_or_default();
        for line in String::from_utf8_lossy(&text).lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
            let key_ok = match &v["key"] {
                serde_json::Value::Null => true,
                k => k.as_str().is_some_and(crate::cache::witness::is_key),
            };
            let reason = match &v["reason"] {
                serde_json::Value::Null => Some("unknown"),
                r => r.as_str().filter(|r| could_be_reason(r)),
            };
            match (v["compile"].as_str(), key_ok, reason) {
                (Some("hit"), true, _) => log.tally.hit += 1,
                (Some("built"), true, _) => log.tally.built += 1,
                (Some("ran"), true, Some(reason)) => {
                    log.tally.ran += 1;
                    *log.tally.reasons.entry(reason.to_string()).or_default() += 1;
                }
                _ => log.ignored += 1,
            }
        }
        log
    }
}

/// An object the compiler driver made for itself and the linker listed, gone by now: in
/// the temporary directory, named `cc…` by gcc and `<source>-<hex>.o` by clang, and
/// never named on the command line. Not a file the compile read.
fn driver_temporary(p: &Path, s: &Shape, cwd: &Path) -> bool {
    !p.exists()
        && p.parent() == Some(std::env::temp_dir().as_path())
        && p.extension().is_some_and(|e| e == "o")
        && !s.args.iter().any(|a| cwd.join(a) == p)
}

/// Short printable text, as every `Why::reason` is: a forged line's reason never brings
/// control characters or a wall of text into report.json.
fn could_be_reason(r: &str) -> bool {
    !r.is_empty() && r.len() <= 200 && !r.chars().any(char::is_control)
}

/// An entry's kept stdout and stderr (absent: empty), each read without following a
/// link and under `Cap::COMPILER_MESSAGES`; None when either cannot be read so.
fn messages(out: &Path) -> Option<[Vec<u8>; 2]> {
    let read = |name: &str| match crate::base::fsutil::read_capped(
        &out.join(name),
        crate::base::fsutil::Cap::COMPILER_MESSAGES,
    ) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(Vec::new()),
        Err(_) => None,
    };
    Some([read("stdout")?, read("stderr")?])
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
