//! The fork server of `fork_server:` (docs/lanes.md, "A fork server"): the one Python
//! server (`proc::server`) with a lane runtime's modules imported once, so the lane
//! processes started before the lock fork from it instead of each importing them again.
//! `scenerun device` starts it before those processes and stops it once the lock command
//! has returned and they are gone.
//! Invariant: no lane depends on it. A lane that finds no server, one that refuses it (a
//! setting a fork cannot take: `refusal` says which, for `--plan`) or one that does not
//! answer within 5 s runs as written (`scenerun_pytest fork` does that); a server that is
//! not ready in time is stopped and said once.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::base::proc::piped::{self, Piped};
use crate::base::proc::server::{self, NotReady, SocketDir};
use crate::manifest::ForkServer;

/// Where a lane finds the server: `SCENERUN_FORK_SERVER`.
pub use crate::base::proc::server_protocol::SOCKET_ENV as ENV;

pub use crate::base::proc::server::socket;

/// A started server, ready.
pub struct Running {
    piped: Option<Piped>,
    _dir: SocketDir,
}

/// Start the server and wait for its ready line. Err: why it is not there (nothing of
/// it is left running); the lanes then start their own interpreters.
pub fn start(
    config: &ForkServer,
    dir: &Path,
    env: &BTreeMap<String, String>,
    run_dir: &Path,
    log: &Path,
) -> Result<Running, String> {
    let sock = socket(run_dir);
    let sock_dir = sock.parent().expect("the socket has a directory");
    let made = server::private_dir(sock_dir)
        .map_err(|e| format!("cannot make {}: {e}", sock_dir.display()))?;
    let mut env = env.clone();
    env.insert(ENV.into(), sock.display().to_string());
    let command = config
        .run
        .render(|_| crate::base::template::Val::Raw("".into()));
    if let Some(logs) = log.parent() {
        std::fs::create_dir_all(logs)
            .map_err(|e| format!("cannot make {}: {e}", logs.display()))?;
    }
    let piped = match piped::spawn(&command, dir, &env, log) {
        Ok(Some(p)) => p,
        Ok(None) => return Err("interrupted".into()),
        Err(e) => return Err(format!("cannot start `{command}`: {e}")),
    };
    let running = Running {
        piped: Some(piped),
        _dir: made,
    };
    let piped = running.piped.as_ref().expect("just set");
    match server::await_ready(piped, config.start_timeout) {
        Ok(_) => Ok(running),
        Err(NotReady::TimedOut) => Err(format!(
            "not ready within {:.0?} (its log: {})",
            config.start_timeout,
            log.display()
        )),
        Err(NotReady::Closed) => Err(format!(
            "it ended before it was ready (its log: {})",
            log.display()
        )),
        Err(NotReady::Said(l)) => Err(format!(
            "it said `{l}` before it was ready (its log: {})",
            log.display()
        )),
        Err(NotReady::Interrupted) => Err("interrupted".into()),
    }
}

impl Running {
    /// No new children; wait for the server to end (it ends once the children it forked
    /// have), at most `within`, then kill it; its socket's directory goes with it.
    pub fn stop(mut self, within: Duration) {
        if let Some(p) = self.piped.take() {
            let _ = p.close(within);
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(p) = self.piped.take() {
            p.kill();
            let _ = p.wait();
        }
    }
}

use crate::base::proc::server_protocol::is_start_only;

/// What a command line sets around `[python OPTIONS] -m scenerun_pytest WHAT`.
#[derive(Default)]
struct Around {
    /// Variables assigned before the interpreter (`X=1 python`, `env X=1 python`).
    assigned: Vec<(String, String)>,
    /// The interpreter's options (`-O`, `-X dev`).
    options: Vec<String>,
}

/// `Around` of `command`; None: it does not run `scenerun_pytest WHAT`.
fn around(command: &str, what: &str) -> Option<Around> {
    let words = shell_words::split(command).ok()?;
    let at = (2..words.len().saturating_sub(1))
        .find(|&i| words[i] == "scenerun_pytest" && words[i - 1] == "-m" && words[i + 1] == what)?;
    let mut p = at - 1;
    let mut options = Vec::new();
    while p > 0 {
        p -= 1;
        let w = &words[p];
        let takes_value = p > 0 && matches!(words[p - 1].as_str(), "-X" | "-W");
        if w.starts_with('-') || takes_value {
            options.insert(0, w.clone());
        } else {
            break;
        }
    }
    let assigned = words[..p]
        .iter()
        .filter_map(|w| w.split_once('='))
        .filter(|(k, _)| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Some(Around { assigned, options })
}

/// For `--plan`: why lane `lane`'s processes run as written although a fork server is
/// configured (Some), or None when they fork from it (or do not ask it). Known before the
/// run: the lane's `env` and what its command line assigns before `python`, for the
/// variables read only when an interpreter starts, and the interpreter's options, set
/// against the server's. What only the run shows (a hard limit above the server's, say)
/// is said in the lane's log.
pub fn refusal(
    server: &ForkServer,
    manifest_env: &BTreeMap<String, String>,
    lane: &crate::manifest::LaneConfig,
) -> Option<Option<String>> {
    let blank = |_| crate::base::template::Val::Raw("".into());
    let Around { assigned, options } = around(&lane.run.render(blank), "fork")?;
    let Around {
        assigned: server_assigned,
        options: server_options,
    } = around(&server.run.render(blank), "zygote").unwrap_or_default();
    let server_env = |k: &str| {
        server_assigned
            .iter()
            .rev()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
            .or(manifest_env.get(k).map(String::as_str))
    };
    let mut set: Vec<&str> = lane
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .chain(assigned.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .filter(|(k, v)| is_start_only(k) && server_env(k) != Some(*v))
        .map(|(k, _)| k)
        .collect();
    set.sort_unstable();
    set.dedup();
    if !set.is_empty() {
        return Some(Some(format!(
            "it sets {}, which {} only when an interpreter starts",
            set.join(", "),
            if set.len() == 1 {
                "is read"
            } else {
                "are read"
            }
        )));
    }
    if options != server_options {
        let shown = |o: &[String]| match o.is_empty() {
            true => "none".to_string(),
            false => format!("`{}`", o.join(" ")),
        };
        return Some(Some(format!(
            "its interpreter options ({}) are not the server's ({})",
            shown(&options),
            shown(&server_options)
        )));
    }
    Some(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_command_line_sets_around_the_interpreter_is_found() {
        let a = around(
            "umask 027; env PYTHONHASHSEED=1 X=2 nice -n 3 python -O -X dev -m scenerun_pytest fork pytest -q",
            "fork",
        )
        .unwrap();
        assert_eq!(
            a.assigned,
            [
                ("PYTHONHASHSEED".into(), "1".into()),
                ("X".into(), "2".into())
            ]
        );
        assert_eq!(a.options, ["-O", "-X", "dev"]);
        assert!(around("python -m pytest", "fork").is_none());
    }
}
