//! The one renderer of notices (`notice::Notice`, from every layer): its words and how
//! loud it is (`line`), on the terminal (`say`, and `ui::Ui` as every layer's
//! `notice::Tell`), or on the inner run's own stderr (`inner_say`).

use crate::base::notice::{
    Direction, LaneNotice, LockLoss, Notice, ShimMissing, Tell, Unadoptable,
};
use crate::base::ui::Ui;
use crate::base::units::short_size;

/// How loud a notice is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Kept under `-q`.
    Always,
    /// Not under `-q`.
    Info,
    /// Only under `-v`.
    Verbose,
}

/// A notice's line, and how loud it is: the one place a notice is worded (by the
/// layer it comes from).
pub fn line(n: &Notice) -> (String, Level) {
    match n {
        Notice::Damaged { .. }
        | Notice::SealKey { .. }
        | Notice::Deprecated { .. }
        | Notice::CacheExposed(_)
        | Notice::RemoteFailed { .. }
        | Notice::RemoteUnsigned { .. }
        | Notice::RemoteMismatch { .. }
        | Notice::RemoteTooBig { .. } => store_line(n),
        Notice::NotPruned
        | Notice::Pruned { .. }
        | Notice::PruneKeptInUse { .. }
        | Notice::PruneKeptBusy { .. }
        | Notice::PruneOverCap { .. }
        | Notice::TraceNotWritten { .. } => warm_line(n),
        Notice::LaneNotPrestarted { .. }
        | Notice::NoForkServer { .. }
        | Notice::Prestarted(_)
        | Notice::TakingLock { .. }
        | Notice::LockRanInnerTwice
        | Notice::LockKilledAfterRelease { .. }
        | Notice::AllFailedInWarm
        | Notice::AllDecidedInWarm
        | Notice::NoHealthyDevice { .. }
        | Notice::CompileLogIgnored { .. }
        | Notice::CompilesNotSigned { .. }
        | Notice::ShimRefused { .. }
        | Notice::ShimLeftOut { .. }
        | Notice::GrantRefused { .. }
        | Notice::InnerAgain
        | Notice::LockLost(_) => device_line(n),
        Notice::Lane(l) => (format!("warning: {}", lane_text(l)), Level::Always),
    }
}

/// What a lane process did that was ignored or worked around, in words.
fn lane_text(l: &LaneNotice) -> String {
    match l {
        LaneNotice::Garbage { why, line } => format!("ignored a results line: {why}: {line}"),
        LaneNotice::MoreIgnored {
            more,
            lane,
            process,
        } => format!("{more} more ignored results lines of lane `{lane}` (process {process}) not shown"),
        LaneNotice::SecondStart { scene } => format!("ignored a second start of scene `{scene}`"),
        LaneNotice::SecondEnd { scene } => format!("ignored a second end of scene `{scene}`"),
        LaneNotice::NotInBatch { scene } => format!(
            "ignored a result for scene `{scene}`, which is not in this lane process's batch"
        ),
        LaneNotice::ReportAfterEnd { nodeid, scene } => {
            format!("ignored a report for `{nodeid}`: scene `{scene}` already ended")
        }
        LaneNotice::ReportNoOwner { nodeid } => format!(
            "ignored a report for `{nodeid}`: no scene of this lane process's batch has it (or a prefix of it) in its args"
        ),
        LaneNotice::ClaimClamped {
            who,
            claimed,
            ran,
            seen,
        } => format!(
            "`{who}` claims {:e} s, more than its lane process has run ({:.3} s): clamped to {:.3} s",
            claimed.0, ran.0, seen.0
        ),
        LaneNotice::ForeignFault { ids } => format!(
            "a lane process reported a device fault on ids it does not hold ({}); ignored",
            ids.join(",")
        ),
        LaneNotice::NotAdopted { lane, why } => format!(
            "lane `{lane}`: {}: its batch runs in a process started now",
            unadoptable_text(why)
        ),
        LaneNotice::CannotHandIds {
            lane,
            process,
            error,
        } => format!(
            "lane `{lane}`: cannot hand its ids to process {process} started before the lock: {error}"
        ),
        LaneNotice::EndedBeforeReady {
            lane,
            scenes,
            how,
            log,
        } => format!(
            "lane `{lane}`: the process started before the lock for {} ended before it was ready ({how}, nothing in its results file; its output: {}): its batch runs in a process started now",
            scenes.join(", "),
            log.display()
        ),
        LaneNotice::PrestartUnused { lane, scenes, pid } => format!(
            "lane `{lane}`: the process started before the lock for its batch of {scenes} scene{} (pid {pid}) was not used: the packing inside the lock differed; it was stopped",
            if *scenes == 1 { "" } else { "s" }
        ),
    }
}

/// Why a process started before the lock cannot be used, in words.
fn unadoptable_text(why: &Unadoptable) -> String {
    match why {
        Unadoptable::BeingStopped { pid } => format!(
            "the process started before the lock (pid {pid}) was being stopped by scenerun device"
        ),
        Unadoptable::ReportedEarly { pid } => format!(
            "the process started before the lock (pid {pid}) reported results before it had its ids (does the lane command wait for $SCENERUN_GO?); it is stopped"
        ),
        Unadoptable::EndedEarly { pid, how, log } => format!(
            "the process started before the lock (pid {pid}) ended before its ids came ({how}; its output: {})",
            log.display()
        ),
        Unadoptable::Gone { pid } => format!(
            "the process started before the lock (pid {pid}) was not there when the inner run started"
        ),
    }
}

/// The base layer's, the cache's and the remote cache's.
fn store_line(n: &Notice) -> (String, Level) {
    match n {
        Notice::Damaged { error } => (
            format!("warning: {error}; ignored as damaged (it is rewritten by the next save)"),
            Level::Always,
        ),
        Notice::SealKey { path, error } => (
            format!(
                "warning: cannot use the seal key {}: {error}; outputs kept by earlier runs (scenes_from) are made again",
                path.display()
            ),
            Level::Always,
        ),
        Notice::Deprecated { key, instead } => (
            format!(
                "warning: manifest: `{key}` is deprecated and will be refused in a later release; write `{instead}` (docs/manifest.md)"
            ),
            Level::Always,
        ),
        Notice::RemoteFailed { failure, off: None } => {
            (format!("warning: remote cache: {failure}"), Level::Always)
        }
        Notice::RemoteFailed {
            failure,
            off: Some(d),
        } => (
            format!(
                "warning: remote cache: {failure}; {} are off for the rest of this run, building locally",
                match d {
                    Direction::Uploads => "uploads",
                    Direction::Downloads => "downloads",
                }
            ),
            Level::Always,
        ),
        Notice::RemoteUnsigned { sign_env } => (
            format!(
                "warning: remote cache: writes are on but ${} holds no signing key; readers require signed records, so nothing is uploaded",
                sign_env.as_deref().unwrap_or("(signing.key_env unset)")
            ),
            Level::Always,
        ),
        Notice::RemoteMismatch { path } => (
            format!(
                "warning: remote cache: {} in the local cache does not match its integrity record; not uploaded (`scenerun cache verify` removes it)",
                path.display()
            ),
            Level::Always,
        ),
        Notice::RemoteTooBig {
            built_by,
            bytes,
            cap,
        } => (
            format!(
                "remote cache: {built_by} ({}) is over cache.remote.max_upload ({}): kept locally only",
                short_size(*bytes),
                short_size(*cap)
            ),
            Level::Info,
        ),
            Notice::CacheExposed(x) => (
                format!(
                    "warning: cache dir {} is writable by {} (mode {:o}): anyone who can write there can plant entries; scenerun checks what it serves, but keep a cache private to its runner user",
                    x.dir.display(),
                    if x.by_all() { "all users" } else { "its group" },
                    x.mode
                ),
                Level::Always,
            ),
        _ => unreachable!("`line` hands each notice to the function of its layer"),
    }
}

/// The warm's.
fn warm_line(n: &Notice) -> (String, Level) {
    match n {
        Notice::NotPruned => (
            "not pruned: nothing was added since a prune with these limits less than an hour ago"
                .into(),
            Level::Verbose,
        ),
        Notice::Pruned {
            removed,
            freed,
            now: Some(now),
        } => (
            format!(
                "pruned {removed} entries ({}); cache now {}",
                short_size(*freed),
                short_size(*now)
            ),
            Level::Verbose,
        ),
        Notice::Pruned {
            removed,
            freed,
            now: None,
        } => (
            format!("pruned {removed} entries ({})", short_size(*freed)),
            Level::Verbose,
        ),
        Notice::PruneKeptInUse { kind, key } => {
            (format!("in use, kept: {kind} {key}"), Level::Verbose)
        }
        Notice::PruneKeptBusy { count } => (
            format!("kept {count} entries in use by another scenerun"),
            Level::Verbose,
        ),
        Notice::PruneOverCap { total, cap } => (
            format!(
                "cache is still over its cap ({} > {}): the rest was used in the last 24 h",
                short_size(*total),
                short_size(*cap)
            ),
            Level::Verbose,
        ),
        Notice::TraceNotWritten { error } => (
            format!("warning: cannot write the trace: {error}"),
            Level::Info,
        ),
        _ => unreachable!("`line` hands each notice to the function of its layer"),
    }
}

/// The device phase's: the outer's, and the inner run's about the lock.
fn device_line(n: &Notice) -> (String, Level) {
    match n {
            Notice::LaneNotPrestarted { lane, error } => (
                format!("warning: device: lane `{lane}`: could not start a process before the lock ({error}); it starts inside the lock"),
                Level::Always,
            ),
            Notice::NoForkServer { why } => (
                format!("warning: device: the fork server is not there ({why}); each lane process starts its own interpreter"),
                Level::Always,
            ),
            Notice::Prestarted(counts) => {
                let each: Vec<String> = counts
                    .iter()
                    .map(|(l, n)| format!("{n} of lane {l}"))
                    .collect();
                let line = format!(
                    "device: lane processes started before the lock: {}",
                    each.join(", ")
                );
                (line, Level::Info)
            }
            Notice::TakingLock { command } => {
                (format!("device: taking the lock once: {command}"), Level::Info)
            }
            Notice::LockRanInnerTwice => (
                "warning: device: the lock command started the inner run more than once; only the first run counted".into(),
                Level::Always,
            ),
            Notice::LockKilledAfterRelease { release_timeout } => (
                format!(
                    "warning: device: the lock command had not returned {} after the device steps ended; its process group was killed (the results are kept)",
                    crate::base::units::short_duration(*release_timeout)
                ),
                Level::Always,
            ),
            Notice::AllFailedInWarm => (
                "device: every selected scene failed in warm; the lock was not taken".into(),
                Level::Always,
            ),
            Notice::AllDecidedInWarm => (
                "device: every selected scene was decided in warm; the lock was not taken".into(),
                Level::Always,
            ),
            Notice::CompileLogIgnored { lines } => (
                format!(
                    "notice: compile log: {lines} line(s) ignored (not written by a compiler shim of this run)"
                ),
                Level::Always,
            ),
            Notice::CompilesNotSigned { why } => (
                format!("notice: compile_cache: what this run's compiles keep will not be signed: {why}"),
                Level::Always,
            ),
            Notice::ShimRefused { pid, runs, me } => (
                format!(
                    "notice: compile_cache: a compile kept by pid {pid} is not signed: the kernel says it runs {}, not this scenerun ({}); under qemu-user every emulated process runs the emulator, so nothing kept is signed there and each compile runs again under the verify key",
                    runs.display(),
                    me.display()
                ),
                Level::Always,
            ),
            Notice::NoHealthyDevice { quarantined } => (
                format!(
                    "device: no healthy device left (quarantined: {}); the remaining scenes were not run",
                    quarantined.join(",")
                ),
                Level::Always,
            ),
            Notice::ShimLeftOut { compiler, why } => (
                format!(
                    "compile_cache: `{compiler}` {}; no compile of it goes through the cache",
                    match why {
                        ShimMissing::NotOnPath => "is not on PATH".to_string(),
                        ShimMissing::NoIdentity { error } => format!("has no identity ({error})"),
                    }
                ),
                Level::Info,
            ),
            Notice::GrantRefused { why } => (why.clone(), Level::Always),
            Notice::InnerAgain => (
                "warning: the lock command started the inner run of this invocation again; this run does nothing (only the first run counts)".into(),
                Level::Always,
            ),
            Notice::LockLost(loss) => {
                let who = match loss {
                    LockLoss::Outer { pid } => format!("scenerun device (pid {pid}) died"),
                    LockLoss::LockTool { pid } => format!("the lock command (pid {pid}) died"),
                    LockLoss::Parent => "the process that started the inner run died".into(),
                };
                (format!("{who}: the lock may be gone, every device step was killed"), Level::Always)
            }
        _ => unreachable!("`line` hands each notice to the function of its layer"),
    }
}

/// The line of a notice posted on the `warning` board (`ui::Ui` says them).
pub fn words(n: &Notice) -> String {
    line(n).0
}

/// A notice on the terminal's stderr, as loud as it is.
pub fn say(ui: &Ui, n: &Notice) {
    let (line, level) = line(n);
    match level {
        Level::Always => ui.always(&line),
        Level::Info => ui.info(&line),
        Level::Verbose if ui.verbose > 0 => ui.info(&line),
        Level::Verbose => {}
    }
}

/// The terminal is where every layer's notices go in a run.
impl Tell for Ui {
    fn tell(&self, n: Notice) {
        say(self, &n);
    }
}

/// What the inner run says about the lock, on its own stderr (which the lock tool
/// keeps): one `scenerun inner:` line, escaped, whatever `-q` says.
pub fn inner_say(n: Notice) {
    let (line, _) = line(&n);
    eprintln!("scenerun inner: {}", crate::base::ui::escape(&line));
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    /// The notices of the base layer and the remote cache, worded here since the
    /// warning board and the remote's own `Notes` went, and how loud each is.
    #[test]
    fn every_notice_of_the_base_layer_and_the_remote_cache() {
        let notices = [
            Notice::Damaged {
                error: "/job/warm.json is over its cap of 64.0 MiB".into(),
            },
            Notice::SealKey {
                path: PathBuf::from("/home/ci/.local/state/scenerun/seal.key"),
                error: "Permission denied (os error 13)".into(),
            },
            Notice::RemoteFailed {
                failure: "http://cache:8080: connection refused".into(),
                off: None,
            },
            Notice::RemoteFailed {
                failure: "http://cache:8080: 503 Service Unavailable".into(),
                off: Some(Direction::Uploads),
            },
            Notice::RemoteFailed {
                failure: "http://cache:8080: timed out".into(),
                off: Some(Direction::Downloads),
            },
            Notice::RemoteUnsigned {
                sign_env: Some("SCENERUN_SIGN_KEY".into()),
            },
            Notice::RemoteUnsigned { sign_env: None },
            Notice::RemoteMismatch {
                path: PathBuf::from("/cache/entries/kernel/ab/abcd/out/add.o"),
            },
            Notice::RemoteTooBig {
                built_by: "compile vector_add/add".into(),
                bytes: 3 << 30,
                cap: 1 << 30,
            },
        ];
        let text: String = notices
            .iter()
            .map(|n| {
                let (line, level) = line(n);
                format!("{:<8} {line}\n", format!("{level:?}"))
            })
            .collect();
        insta::assert_snapshot!("base_and_remote", text);
    }

    /// What lane processes did that was ignored or worked around, one of each (the
    /// inner run notes them in the live file; the outer words them here).
    #[test]
    fn every_lane_notice() {
        use crate::base::notice::Secs;
        let pid = 4242;
        let log = PathBuf::from("/job/logs/lanes/npu.3.log");
        let lane = || "npu".to_string();
        let notices = [
            LaneNotice::Garbage {
                why: "not JSON (expected value at line 1 column 1)".into(),
                line: "Segmentation fault".into(),
            },
            LaneNotice::MoreIgnored {
                more: 480,
                lane: lane(),
                process: 3,
            },
            LaneNotice::SecondStart {
                scene: "add".into(),
            },
            LaneNotice::SecondEnd {
                scene: "add".into(),
            },
            LaneNotice::NotInBatch {
                scene: "nosuch".into(),
            },
            LaneNotice::ReportAfterEnd {
                nodeid: "t.py::T::x".into(),
                scene: "T.x".into(),
            },
            LaneNotice::ReportNoOwner {
                nodeid: "other.py::x".into(),
            },
            LaneNotice::ClaimClamped {
                who: "add".into(),
                claimed: Secs(1e308),
                ran: Secs(2.5),
                seen: Secs(0.75),
            },
            LaneNotice::ForeignFault {
                ids: vec!["7".into(), "9".into()],
            },
            LaneNotice::NotAdopted {
                lane: lane(),
                why: Unadoptable::BeingStopped { pid },
            },
            LaneNotice::NotAdopted {
                lane: lane(),
                why: Unadoptable::ReportedEarly { pid },
            },
            LaneNotice::NotAdopted {
                lane: lane(),
                why: Unadoptable::EndedEarly {
                    pid,
                    how: "exited with status 3".into(),
                    log: log.clone(),
                },
            },
            LaneNotice::NotAdopted {
                lane: lane(),
                why: Unadoptable::Gone { pid },
            },
            LaneNotice::CannotHandIds {
                lane: lane(),
                process: 3,
                error: "Broken pipe (os error 32)".into(),
            },
            LaneNotice::EndedBeforeReady {
                lane: lane(),
                scenes: vec!["add".into(), "mul".into()],
                how: "exited with status 3".into(),
                log,
            },
            LaneNotice::PrestartUnused {
                lane: lane(),
                scenes: 1,
                pid,
            },
            LaneNotice::PrestartUnused {
                lane: lane(),
                scenes: 2,
                pid,
            },
        ];
        let text: String = notices
            .into_iter()
            .map(|n| {
                let (line, level) = line(&Notice::Lane(n));
                format!("{:<8} {line}\n", format!("{level:?}"))
            })
            .collect();
        insta::assert_snapshot!("lane", text);
    }
}
