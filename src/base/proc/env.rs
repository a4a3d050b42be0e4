//! The one builder of a child and the environment it is scrubbed of: the secrets the
//! manifest names are never inherited, URL variables lose their userinfo, and the signal
//! state is a fresh program's. Invariant: every child scenerun starts, but the watchdog
//! (scenerun's own binary), is made by `for_child` (through `sh` or `program`).

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::sync::Mutex;

/// Variables no child may inherit: the secrets the manifest names (the remote cache's
/// token and signing key, docs/remote-cache.md). Kept for the whole process.
static HIDDEN: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Never hand these variables to a child from now on (`sh` and every step, lane,
/// generator, identity and lock command go through it).
pub fn hide_from_children(names: impl IntoIterator<Item = String>) {
    let mut hidden = HIDDEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for n in names {
        if !hidden.contains(&n) {
            hidden.push(n);
        }
    }
}

/// Variables that hold the remote cache's URL (`$SCENERUN_REMOTE_URL`, and whatever
/// the manifest's `cache.remote.url` expands): a child gets them without the URL's
/// user and password. Kept for the whole process.
static URL_VARS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// From now on, hand these variables to a child only with the userinfo (`user:pass@`)
/// of every URL in them removed (`without_userinfo`).
pub fn strip_userinfo_for_children(names: impl IntoIterator<Item = String>) {
    let mut vars = URL_VARS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for n in names {
        if !vars.contains(&n) {
            vars.push(n);
        }
    }
}

/// `text` with the userinfo of every URL in it removed: `http://ci:pw@host/x` becomes
/// `http://host/x`. The one place scenerun redacts a URL (children's environment,
/// messages, the kept manifest).
pub fn without_userinfo(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains("://") || !text.contains('@') {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, after) = rest.split_at(i + 3);
        out.push_str(head);
        let end = after
            .find(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace())
            .unwrap_or(after.len());
        match after[..end].rfind('@') {
            Some(at) => rest = &after[at + 1..],
            None => rest = after,
        }
    }
    out.push_str(rest);
    std::borrow::Cow::Owned(out)
}

/// The URL variables a child would inherit or be given, with their values redacted.
fn url_vars_for_child(given: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let vars = URL_VARS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    vars.iter()
        .filter_map(|n| {
            let value = match given.get(n) {
                Some(v) => v.clone(),
                None => std::env::var(n).ok()?,
            };
            match without_userinfo(&value) {
                std::borrow::Cow::Owned(clean) => Some((n.clone(), clean)),
                std::borrow::Cow::Borrowed(_) => None,
            }
        })
        .collect()
}

/// The hidden variables a child would inherit, except those in `given` (what a
/// manifest's own `env` sets is the manifest's choice).
fn hidden_except(given: &BTreeMap<String, String>) -> Vec<String> {
    let hidden = HIDDEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    hidden
        .iter()
        .filter(|n| !given.contains_key(*n))
        .cloned()
        .collect()
}

/// The whole environment a child `sh` starts with `env` gets: the inherited one less
/// what `hide_from_children` named, URL variables redacted, `env` on top (a variable
/// whose name or value is not UTF-8 is left out). For a child another process starts
/// on scenerun's behalf (a warm step forked by its worker), so it gets what `sh` gives.
pub fn child_env(env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut all: BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    for n in hidden_except(env) {
        all.remove(&n);
    }
    all.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
    all.extend(url_vars_for_child(env));
    all
}

/// The one builder of the `sh -c` children scenerun starts for the manifest's commands
/// (steps, lanes, generators, identity and lock commands): run in `dir` with the
/// inherited environment (less what `hide_from_children` named) and `env` on top, stdin
/// from /dev/null, any exit status a result rather than an error (`unchecked`), and the
/// signal state a program expects: scenerun ignores SIGXFSZ (to get EFBIG) and blocks
/// SIGINT/SIGTERM in its threads, a child gets the defaults. Callers add where its output
/// goes and, through `before_spawn`, its process group.
pub fn sh(command: &str, dir: &Path, env: &BTreeMap<String, String>) -> duct::Expression {
    shell(command, dir, env).stdin_null()
}

/// `sh` without its stdin: a piped child (`piped`) gets a pipe there (duct lets an inner
/// redirection win, so `sh`'s own would).
pub(super) fn shell(command: &str, dir: &Path, env: &BTreeMap<String, String>) -> duct::Expression {
    for_child(duct::cmd("sh", ["-c", command]), dir, env)
}

/// A program run with its own arguments, no shell between (`scenerun cc` runs the real
/// compiler so, `--changed-since` runs `git`): the environment and signal state as `sh`
/// gives them (less what `hide_from_children` named, URL variables redacted); stdin,
/// stdout and stderr inherited unless the caller redirects them. No `Command::new`
/// elsewhere hands a child scenerun's environment.
/// `program` is a name looked up on `PATH` (`git`) or a path (a compiler's real file),
/// as a shell would take it: a bare name is never read as `./name`.
pub fn program(
    program: impl AsRef<std::ffi::OsStr>,
    args: &[std::ffi::OsString],
    dir: &Path,
    env: &BTreeMap<String, String>,
) -> duct::Expression {
    let program: std::ffi::OsString = program.as_ref().to_owned();
    for_child(duct::cmd(program, args), dir, env)
}

/// `e` in `dir` with `env` on top of the inherited environment, less the hidden
/// variables, the URL variables redacted, and the signal state a program expects.
fn for_child(e: duct::Expression, dir: &Path, env: &BTreeMap<String, String>) -> duct::Expression {
    let mut e = e.dir(dir).unchecked();
    // The URL variables redacted, whether given or inherited; each name is set once, so
    // which of two settings of a name duct would keep never matters.
    let redacted: BTreeMap<String, String> = url_vars_for_child(env).into_iter().collect();
    for (k, v) in env {
        e = e.env(k, redacted.get(k).unwrap_or(v));
    }
    for (k, v) in redacted.iter().filter(|(k, _)| !env.contains_key(*k)) {
        e = e.env(k, v);
    }
    // Never one of `env`'s names (`hidden_except`): the order of the two cannot matter.
    for n in hidden_except(env) {
        e = e.env_remove(n);
    }
    e.before_spawn(|c| {
        // SAFETY: between fork and exec the closure calls only async-signal-safe
        // functions (signal, sigemptyset, pthread_sigmask) on a stack value.
        unsafe {
            c.pre_exec(|| {
                libc::signal(libc::SIGXFSZ, libc::SIG_DFL);
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
                Ok(())
            });
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The signal masks of a child `sh` made: `(SigBlk, SigIgn)` from its status.
    fn child_masks() -> (u64, u64) {
        let out = sh(
            "grep -E '^Sig(Blk|Ign)' /proc/self/status",
            Path::new("/"),
            &BTreeMap::new(),
        )
        .stdout_capture()
        .run()
        .expect("sh runs");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let mask = |name: &str| {
            let line = text
                .lines()
                .find(|l| l.starts_with(name))
                .expect("a mask line");
            u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
        };
        (mask("SigBlk:"), mask("SigIgn:"))
    }

    /// scenerun ignores SIGXFSZ and blocks SIGINT/SIGTERM in its threads; every child
    /// the one builder makes starts with neither (identity commands included, which
    /// had kept both).
    #[test]
    fn a_child_gets_the_default_signal_state() {
        let bit = |sig: i32| 1u64 << (sig - 1);
        let masks = std::thread::spawn(move || {
            // SAFETY: plain libc calls on stack values; SIG_IGN installs no handler code.
            unsafe {
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGTERM);
                libc::sigaddset(&mut set, libc::SIGINT);
                libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            }
            child_masks()
        })
        .join()
        .unwrap();
        let (blocked, ignored) = masks;
        assert_eq!(
            blocked & (bit(libc::SIGTERM) | bit(libc::SIGINT)),
            0,
            "{blocked:x}"
        );
        assert_eq!(ignored & bit(libc::SIGXFSZ), 0, "{ignored:x}");
    }
}
