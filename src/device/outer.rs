//! `scenerun device` (outer): verify that every selected scene is warm, freeze the plan,
//! and call the lock command — exactly once, here, and only when something can run. A
//! scene with missing artifacts never costs a card: the check happens before the lock.
//! Every ending writes report.json and junit.xml (docs/device.md, docs/reports.md).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;

use super::events::Shown;
use super::freeze::{freeze, grace, lay_out, write_frozen};
use super::lane::fork_server;
use super::lane::prestart::{self, Prestart};
use super::lockrun::{self, Killed, LockEnding, LockRun};
use super::not_warm::Missing;
use super::report::{DeviceReport, LockReport, Report, SceneReport, Sink, StepReport};
use super::runs::{self, Invocation};
use super::{Frozen, FrozenScene, Infra, Results, SceneOutcome, SceneResult};
use crate::base::error::Error;
use crate::base::exit::Exit;
use crate::base::notice::Notice;
use crate::base::template::{Ph, Val};
use crate::cache::history::{History, HistoryId};
use crate::plan::Plan;

pub struct Options<'a> {
    pub no_lock: bool,
    /// The ids `--no-lock` runs on.
    pub devices: Vec<String>,
    pub report_dir: PathBuf,
    /// Where every ending's report goes (written into `report_dir`).
    pub sink: &'a dyn Sink,
    /// Which setting chose the cache dir (named when something is not warm).
    pub cache_from: crate::base::layout::CacheFrom,
    /// Where the phase's notices and live lines are shown (report/ renders them).
    pub shown: &'a dyn Shown,
}

fn device_report(r: &Results, held: f64) -> DeviceReport {
    DeviceReport {
        granted: r.granted.clone(),
        inner_secs: r.ended - r.started,
        busy_secs: r.busy_secs,
        device_secs_used: r.device_secs_used,
        device_secs_held: r.granted.len() as f64 * held,
        startup_secs: r.startup_secs,
        quarantined: r.quarantined.clone(),
        lanes: r.lanes.clone(),
        compiles: None,
        efficiency: if held > 0.0 {
            (r.busy_secs / held).min(1.0)
        } else {
            0.0
        },
    }
}

/// What the inner run left, if it is the results of this frozen plan: one result per
/// frozen scene, in order (the report joins them by index).
fn read_results(frozen: &Frozen) -> Option<Results> {
    crate::base::fsutil::read_capped(&frozen.results, crate::base::fsutil::Cap::DEVICE_RUN)
        .ok()
        .and_then(|b| serde_json::from_slice::<Results>(&b).ok())
        .filter(|r| {
            r.scenes.len() == frozen.scenes.len()
                && r.scenes
                    .iter()
                    .zip(&frozen.scenes)
                    .all(|(r, f)| r.name == f.name)
        })
}

/// The fixed surroundings of one device phase, handed to its helpers together.
#[derive(Clone, Copy)]
struct Phase<'a> {
    plan: &'a Plan,
    opts: &'a Options<'a>,
}

/// A lock call that did not complete: the exit code it calls for, what happened, the
/// lock command's output tail, and whatever the inner run wrote.
struct LockFailure {
    exit: Exit,
    what: String,
    tail: String,
    results: Option<Results>,
}

impl LockFailure {
    /// The lock command was not called, or not yet: nothing ran, nothing to show.
    fn before(exit: Exit, what: String) -> LockFailure {
        LockFailure {
            exit,
            what,
            tail: String::new(),
            results: None,
        }
    }
}

/// Start the lanes that start before the lock (docs/lanes.md, lanes started before the
/// lock) and write the frozen plan that names them, for the inner run to adopt. From
/// here on a cancel stops them too; the caller `finish`es them once the lock command
/// has returned.
fn prestart_lanes(ph: Phase, frozen: &mut Frozen) -> (Prestart, Result<()>) {
    let Phase { plan, opts } = ph;
    let shown = opts.shown;
    crate::base::proc::set_grace(grace(plan));
    let units = match prestart::wanted(frozen) {
        true => super::inner::to_prestart(frozen, frozen.device_count),
        false => Vec::new(),
    };
    let server = match (&plan.manifest.fork_server, units.is_empty()) {
        (Some(config), false) => {
            let log = plan.job_dir.join("logs").join("fork-server.log");
            let started = fork_server::start(
                config,
                &plan.manifest.dir,
                &plan.manifest.env,
                &frozen.run_dir,
                &log,
            );
            started
                .map_err(|why| {
                    shown.notice(Notice::NoForkServer {
                        why: why.to_string(),
                    })
                })
                .ok()
        }
        _ => None,
    };
    let mut prestart = prestart::start(frozen, units, grace(plan), |n| shown.notice(n));
    prestart.keep_until_finished(server);
    let counts = prestart.counts();
    if !counts.is_empty() {
        let counts = counts.iter().map(|(l, n)| (l.to_string(), *n)).collect();
        shown.notice(Notice::Prestarted(counts));
    }
    let written = write_frozen(frozen);
    (prestart, written)
}

/// The start-ups before the lock (lanes, the fork server) and the frozen plan written:
/// Err when the lock command is not to be called — the plan could not be written, or a
/// signal came during the start-ups (the lock command is then never called).
fn before_lock(ph: Phase, frozen: &mut Frozen) -> Result<Prestart, Box<LockFailure>> {
    let (mut prestart, written) = prestart_lanes(ph, frozen);
    let failure = match written {
        Err(e) => LockFailure::before(Exit::Infra, format!("was not called: {e:#}")),
        Ok(()) if crate::base::proc::interrupted() => LockFailure::before(
            Exit::Interrupted,
            "interrupted before the lock command was called".into(),
        ),
        Ok(()) => return Ok(prestart),
    };
    prestart.finish();
    Err(Box::new(failure))
}

/// Say how the lock command misbehaved, if it did: it ran the inner run twice, or it
/// had to be killed for not returning.
fn warn_lock_ending(shown: &dyn Shown, ran: &LockRun, repeated: bool, release_timeout: Duration) {
    if repeated {
        shown.notice(Notice::LockRanInnerTwice);
    }
    if ran.killed == Some(Killed::ReleaseTimeout) {
        shown.notice(Notice::LockKilledAfterRelease { release_timeout });
    }
}

/// How long a cancel and a lock tool that does not return are given.
fn lock_limits(plan: &Plan, frozen: &Frozen) -> lockrun::Limits {
    lockrun::Limits {
        // A cancel stops each step with its stop signal and wait first, then the grace.
        grace: grace(plan) + frozen.longest_stop_wait(),
        release_timeout: plan
            .manifest
            .lock
            .as_ref()
            .and_then(|l| l.release_timeout)
            .unwrap_or(super::DEFAULT_RELEASE_TIMEOUT),
    }
}

/// Call the lock command — the one acquisition — and read what the inner run left.
/// Anything but complete results from an inner run that ended inside the lock is an
/// infrastructure error (exit 3, or 2 when interrupted), with the report still written.
fn through_lock(ph: Phase, frozen: &mut Frozen, report: &mut Report) -> Result<Results> {
    let Phase { plan, opts } = ph;
    let shown = opts.shown;
    let Some(command) = lock_command_in(plan, &frozen.run_dir) else {
        return Err(crate::base::error::err!(
            Usage,
            "the manifest has no `lock:` section; add one, or run with --no-lock --devices LIST"
        ));
    };
    let log = crate::base::layout::lock_log(&plan.job_dir);
    let _ = std::fs::remove_file(&log);
    let limits = lock_limits(plan, frozen);
    let mut lock = LockReport {
        command: command.clone(),
        called_at: super::unix_now(),
        ..Default::default()
    };
    if crate::base::proc::interrupted() {
        let what = "interrupted before the lock command was called".into();
        let f = LockFailure::before(Exit::Interrupted, what);
        return Err(fail(ph, frozen, report, lock, f));
    }
    let mut prestart = match before_lock(ph, frozen) {
        Ok(p) => p,
        Err(f) => return Err(fail(ph, frozen, report, lock, *f)),
    };
    shown.notice(Notice::TakingLock {
        command: command.to_string(),
    });
    let run_dir = frozen.run_dir.clone();
    let live = shown.follow(super::live_path(&run_dir), true);
    let ran = lockrun::run(
        &command,
        &plan.manifest.dir,
        &plan.manifest.env,
        &log,
        &limits,
        |pid| {
            frozen.lock_tool = pid;
            write_frozen(frozen)
        },
        || runs::inner_started(&run_dir) && !runs::inner_running(&run_dir),
    );
    // Read the results only once the inner run has really ended (bounded: it kills its
    // steps within the grace after a SIGTERM, at once when the lock tool is gone).
    let inner_ended =
        super::runs::wait_for_inner(&run_dir, limits.grace * 2 + Duration::from_secs(1));
    prestart.finish(); // the lock is released: none of them runs on
    drop(live);
    let tail = crate::base::proc::log_tail(&log, 3000);
    lock.output_tail = Some(tail.clone());
    let results = read_results(frozen);
    let ran = match ran {
        Ok(r) => r,
        Err(e) => {
            lock.returned_at = super::unix_now();
            let f = LockFailure {
                exit: Exit::Infra,
                what: format!("could not be started: {e}"),
                tail,
                results,
            };
            return Err(fail(ph, frozen, report, lock, f));
        }
    };
    if let Some(held) = lock_timings(&mut lock, &ran, results.as_ref()) {
        let r = results.as_ref().expect("held time comes from results");
        report.device = Some(device_report(r, held));
    }
    let repeated = runs::repeated(&run_dir);
    warn_lock_ending(shown, &ran, repeated, limits.release_timeout);
    let ended = LockCallEnd {
        interrupted: crate::base::proc::interrupted(),
        inner_ended,
        repeated,
    };
    let failure = lock_failure(&ran, results.as_ref(), ended);
    match (failure, results) {
        (None, Some(r)) => {
            report.lock = Some(lock);
            Ok(r)
        }
        (failure, results) => {
            let (exit, what) = failure.expect("no failure means results are present");
            let f = LockFailure {
                exit,
                what,
                tail,
                results,
            };
            Err(fail(ph, frozen, report, lock, f))
        }
    }
}

/// The lock's timings from a lock call and what the inner run left: when it was called
/// and returned, its exit code, the queue wait (until the inner run started, or the whole
/// call when it never did: a queue timeout waited all along), and the time held, which
/// it returns when the inner run ran.
fn lock_timings(lock: &mut LockReport, ran: &LockRun, results: Option<&Results>) -> Option<f64> {
    lock.called_at = ran.called_at;
    lock.returned_at = ran.returned_at;
    lock.signal_forwarded_at = ran.forwarded_at;
    lock.exit_code = match ran.ending {
        LockEnding::Exited(c) => Some(c),
        LockEnding::Signaled(_) => None,
    };
    lock.queue_wait_secs = Some(match results {
        Some(r) => (r.started - ran.called_at).max(0.0),
        None => ran.returned_at - ran.called_at,
    });
    let r = results?;
    let held = ran.returned_at - r.started;
    lock.inner_started_at = Some(r.started);
    lock.inner_ended_at = Some(r.ended);
    lock.held_secs = Some(held);
    Some(held)
}

/// How a lock call ended, besides the lock tool's own ending.
#[derive(Debug, Clone, Copy)]
struct LockCallEnd {
    /// scenerun was interrupted (and forwarded the signal).
    interrupted: bool,
    /// The inner run is no longer running.
    inner_ended: bool,
    /// The lock tool started the inner run more than once.
    repeated: bool,
}

/// Whether a lock call failed, and how to say it: interrupted; an unusable grant; no
/// device steps run; the lock tool cut the run short; or it returned while the steps
/// were still running. None: the inner run's results stand.
fn lock_failure(
    ran: &LockRun,
    results: Option<&Results>,
    end: LockCallEnd,
) -> Option<(Exit, String)> {
    let how = ran.ending.describe();
    // The inner exits 0 or 1 and the lock tool passes that on. Any other ending, even
    // with results on disk, means the lock tool cut the run short (`--max-time`, a
    // signal) — unless scenerun killed it itself for not returning, or the lock tool ran
    // the inner command twice (the second run's code is not the first's).
    let cut_short = ran.killed.is_none()
        && !end.repeated
        && match ran.ending {
            LockEnding::Exited(c) => !matches!(c, 0 | 1),
            LockEnding::Signaled(_) => true,
        };
    // The inner's own verdict decides, not the two clocks: its watcher can see the lock
    // tool gone (and stop its steps) before this process's poll sees the tool return.
    let still_running = !end.inner_ended
        || results.is_some_and(|r| {
            r.ended > ran.returned_at || r.scenes.iter().any(|s| s.infra == Some(Infra::LockLost))
        });
    if end.interrupted {
        Some((
            Exit::Interrupted,
            format!("was interrupted: SIGTERM forwarded to it, it {how}"),
        ))
    } else if let Some(why) = results.and_then(|r| r.infra_error.clone()) {
        Some((
            Exit::Infra,
            format!("ran the device phase with an unusable grant: {why}"),
        ))
    } else if results.is_none() && end.inner_ended {
        Some((
            Exit::Infra,
            format!("returned ({how}) without running the device steps"),
        ))
    } else if cut_short {
        Some((
            Exit::Infra,
            format!("ended ({how}) before the device steps finished"),
        ))
    } else if still_running {
        Some((
            Exit::Infra,
            format!("returned ({how}) while the device steps were still running outside it"),
        ))
    } else {
        None
    }
}

/// Write the report of a device phase the lock command did not complete, and the error.
fn fail(
    ph: Phase,
    frozen: &Frozen,
    report: &mut Report,
    mut lock: LockReport,
    f: LockFailure,
) -> anyhow::Error {
    let Phase { plan, opts, .. } = ph;
    let LockFailure {
        exit,
        what,
        tail,
        results,
    } = f;
    if lock.returned_at == 0.0 {
        lock.returned_at = super::unix_now();
    }
    let command = lock.command.clone();
    report.lock = Some(lock);
    // An interrupted run, or one whose scenes got somewhere, still ends with its table.
    let show = exit == Exit::Interrupted || results.is_some();
    let msg = format!("the lock command {what}; lock command: {command}");
    let cause = if exit == Exit::Interrupted {
        Infra::Interrupted
    } else {
        Infra::LockFailed
    };
    report.scenes = scene_reports(plan, frozen, results.map(|r| r.scenes));
    // Scenes that finished keep their outcome; the rest did not run because of this,
    // and a scene the last results found running was cut short by it.
    for s in report.scenes.iter_mut().map(|s| &mut s.result) {
        if s.infra.is_some() {
            continue;
        }
        match s.outcome {
            SceneOutcome::NotRun => s.message = Some(what.clone()),
            SceneOutcome::Interrupted => {
                let was = s.message.take().unwrap_or_default();
                s.message = Some(format!("{was}; the lock command {what}"));
            }
            _ => continue,
        }
        s.infra = Some(cause);
    }
    report.exit_code = exit.code();
    report.error = Some(format!("{msg}\n{tail}"));
    let _ = opts.sink.write(report);
    if show {
        opts.sink.show(report);
    }
    let msg = match tail.trim().is_empty() {
        true => msg,
        false => format!(
            "{msg}\n--- lock command output (last lines) ---\n{}",
            tail.trim_end()
        ),
    };
    anyhow::Error::new(match exit {
        Exit::Interrupted => Error::Interrupted(msg),
        _ => Error::Infra(msg),
    })
}

/// The device steps' durations (passed ones) and lane start-ups, into the history.
fn record_history(plan: &Plan, r: &Results) {
    let durations: Vec<(String, f64)> = r
        .scenes
        .iter()
        .filter(|s| s.outcome.passed() && s.duration_secs > 0.0)
        .map(|s| (HistoryId::Device(&s.name).key(), s.duration_secs))
        .chain(r.lanes.iter().filter_map(|l| {
            let key = HistoryId::LaneStartup(&l.lane).key();
            l.startup_secs.map(|s| (key, s))
        }))
        .collect();
    if plan.store.root.join("locks").is_dir() {
        History::record(&plan.store.root, &durations);
    }
}

/// The lock command as `--plan` and `--dry-run` show it (the run dir exists only at
/// run time).
pub fn lock_command(plan: &Plan) -> Option<String> {
    if plan.no_lock.is_some() {
        return None;
    }
    lock_command_in(plan, &runs::preview_dir(&plan.job_dir))
}

/// The lock command exactly as it will run, `{run}` re-entering this binary with the
/// frozen plan of the invocation whose directory is `run_dir`.
fn lock_command_in(plan: &Plan, run_dir: &Path) -> Option<String> {
    let lock = plan.manifest.lock.as_ref()?;
    let inner = super::inner_command(&runs::plan_path(run_dir));
    Some(lock.submit.render(|ph| match ph {
        Ph::DeviceCount => Val::One(plan.device_count.to_string().into()),
        Ph::Run => Val::One(inner.clone().into()),
        _ => Val::Raw("".into()),
    }))
}

fn step_reports(plan: &Plan, scene: usize) -> Vec<StepReport> {
    let ps = &plan.scenes[scene];
    ps.kernels
        .iter()
        .chain(&ps.fixture)
        .chain(&ps.golden)
        .chain(&ps.prepare)
        .map(|&i| {
            let s = &plan.steps[i];
            StepReport {
                kind: s.kind,
                name: s.name.clone(),
                key: s.key.clone(),
                status: s.status.word().to_string(),
            }
        })
        .collect()
}

/// Every frozen scene's row of the report: its result from the inner run when there is
/// one (the results hold the frozen scenes in order, so row `i` is scene `i`), else as
/// it stands without a run; beside it what the plan knew of it.
fn scene_reports(
    plan: &Plan,
    frozen: &Frozen,
    results: Option<Vec<SceneResult>>,
) -> Vec<SceneReport> {
    let results = results.unwrap_or_else(|| frozen.scenes.iter().map(unrun).collect());
    results
        .into_iter()
        .zip(&frozen.scenes)
        .enumerate()
        .map(|(i, (result, fs))| SceneReport {
            result,
            selection: fs.selection.clone(),
            nodeid: fs.nodeid.clone(),
            case: fs.case.clone(),
            outputs: super::outputs::written(&frozen.report_dir, &fs.name),
            steps: step_reports(plan, i),
        })
        .collect()
}

/// A frozen scene's result when the inner run gave none: failed in warm, or not run.
fn unrun(fs: &FrozenScene) -> SceneResult {
    match (&fs.warm_failure, &fs.verdict) {
        (Some(w), _) => SceneResult::unrun(fs, SceneOutcome::FailedInWarm, Some(w.to_string())),
        (None, Some(v)) => SceneResult {
            duration_secs: v.secs,
            log: Some(v.log.clone()),
            ..SceneResult::unrun(fs, v.outcome, v.message.clone())
        },
        (None, None) => SceneResult::unrun(fs, SceneOutcome::NotRun, None),
    }
}

pub fn run(plan: &Plan, opts: &Options) -> Result<Exit> {
    // The report dir first: a second run on it is refused before it writes anything.
    let _report_lock = match runs::lock_report_dir(&opts.report_dir) {
        Ok(Ok(l)) => l,
        Ok(Err(busy)) => {
            return Err(anyhow::Error::new(Error::ReportDirBusy {
                holder: busy.holder,
                dir: opts.report_dir.clone(),
            }))
        }
        Err(e) => {
            let what = format!("cannot use the report dir {}", opts.report_dir.display());
            return Err(crate::base::error::infra(what, e));
        }
    };
    // From here on every ending writes its own report; none from an earlier run stays.
    let _ = std::fs::remove_file(opts.report_dir.join("report.json"));
    let _ = std::fs::remove_file(opts.report_dir.join("junit.xml"));
    super::outputs::clear(&opts.report_dir);
    let inv = Invocation::create(&plan.job_dir).map_err(|e| {
        let what = format!(
            "cannot create a run directory under {}",
            plan.job_dir.display()
        );
        crate::base::error::infra(what, e)
    })?;
    let result = run_in(plan, opts, &inv);
    inv.remove();
    result
}

fn run_in(plan: &Plan, opts: &Options, inv: &Invocation) -> Result<Exit> {
    let shown = opts.shown;
    let (mut frozen, missing) = freeze(plan, &opts.report_dir, &inv.dir);
    let mut report = Report::new(&plan.manifest.file);
    report.profile = plan.manifest.profile.clone();
    if !missing.is_empty() {
        return Err(not_warm(plan, opts, &frozen, &missing, report));
    }
    if frozen.scenes.iter().all(FrozenScene::settled_in_warm) {
        // Every scene failed in warm or had its test run there: no lock.
        report.scenes = scene_reports(plan, &frozen, None);
        let exit = match report.scenes.iter().all(|s| s.result.outcome.passed()) {
            true => Exit::Ok,
            false => Exit::Failed,
        };
        report.exit_code = exit.code();
        let all_failed = frozen.scenes.iter().all(|s| s.warm_failure.is_some());
        if all_failed {
            report.error =
                Some("every selected scene failed in warm; the lock was not taken".into());
        }
        opts.sink.write(&report)?;
        opts.sink.show(&report);
        shown.notice(match all_failed {
            true => Notice::AllFailedInWarm,
            false => Notice::AllDecidedInWarm,
        });
        return Ok(exit);
    }
    frozen.through_lock = !opts.no_lock;
    // From here on, every child sees the entries read-only where a mount namespace can
    // be made (the lock command, and so the inner run, included).
    frozen.readonly = crate::base::proc::view::entry_dirs(&plan.store.root);
    crate::base::proc::view::enter_for_children(&frozen.readonly);
    let mut witness = None;
    let laid = lay_out(&mut frozen).and_then(|()| {
        witness = listen(plan, shown, &frozen.run_dir);
        let socket = witness.as_ref().map(crate::cache::witness::Witness::path);
        shims(plan, shown, &frozen, socket)
    });
    if let Err(e) = laid {
        report.scenes = scene_reports(plan, &frozen, None);
        report.exit_code = Exit::Infra.code();
        report.error = Some(format!("{e:#}"));
        let _ = opts.sink.write(&report);
        return Err(e);
    }
    let r = if opts.no_lock {
        // Parsed (strictly) by the command line already.
        let ids = opts.devices.clone();
        crate::base::proc::set_grace(grace(plan));
        let live = shown.follow(super::live_path(&frozen.run_dir), false);
        let mut r = super::inner::run(&frozen, ids);
        drop(live);
        super::ending::classify(&frozen, &mut r, false, crate::base::proc::interrupted());
        report.device = Some(device_report(&r, r.ended - r.started));
        r
    } else {
        through_lock(Phase { plan, opts }, &mut frozen, &mut report)?
    };
    record_history(plan, &r);
    let compiles = crate::compiled::RunLog::read(&frozen.run_dir);
    if let Some(w) = &witness {
        if let Some(r) = w.refused() {
            shown.notice(Notice::ShimRefused {
                pid: r.pid,
                runs: r.runs,
                me: r.me,
            });
        }
        w.sign_told(&plan.store);
    }
    if compiles.ignored > 0 {
        shown.notice(Notice::CompileLogIgnored {
            lines: compiles.ignored,
        });
    }
    if let Some(d) = report.device.as_mut().filter(|_| compiles.tally.any()) {
        d.compiles = Some(compiles.tally);
    }
    if r.no_healthy_device {
        shown.notice(Notice::NoHealthyDevice {
            quarantined: r.quarantined.clone(),
        });
    }
    let exit = if crate::base::proc::interrupted() {
        Exit::Interrupted
    } else {
        super::ending::exit_of(&r)
    };
    report.scenes = scene_reports(plan, &frozen, Some(r.scenes));
    finish(opts, report, exit)
}

/// Where this run hears what its compiler shims publish (`cache::witness`), when it
/// holds the signing key and has shims: the only word it signs compiled entries on.
fn listen(
    plan: &Plan,
    shown: &dyn Shown,
    run_dir: &Path,
) -> Option<crate::cache::witness::Witness> {
    if plan.manifest.compile_cache.is_empty() || !plan.store.keys.signs() {
        return None;
    }
    match crate::cache::witness::Witness::listen(&run_dir.join("compiles.sock")) {
        Ok(w) => Some(w),
        Err(e) => {
            shown.notice(Notice::CompilesNotSigned { why: e.to_string() });
            None
        }
    }
}

/// The compiler shims of `compile_cache:` in the run's `bin/`; a compiler left without
/// one is said once (not on `PATH`: its compiles, if any, fail as they would without
/// scenerun; no identity: they run without the cache).
fn shims(plan: &Plan, shown: &dyn Shown, frozen: &Frozen, socket: Option<&Path>) -> Result<()> {
    // Each lane's and device step's own `PATH`: the compiler a shim stands for is the
    // one the caller's `PATH` finds.
    let paths = (frozen.scenes.iter().map(|s| &s.env))
        .chain(frozen.lanes.values().map(|l| &l.env))
        .filter_map(|env| env.get("PATH").map(String::as_str));
    let run_dir = &frozen.run_dir;
    let shims = crate::compiled::write_shims(&plan.manifest, &plan.store, run_dir, paths, socket)?;
    for (compiler, why) in shims {
        shown.notice(Notice::ShimLeftOut { compiler, why });
    }
    Ok(())
}

/// Exit 6 before any lock: every scene's row says what it misses (or that others
/// miss something), the report is written, and the error is the summary.
fn not_warm(
    plan: &Plan,
    opts: &Options,
    frozen: &Frozen,
    missing: &[Missing],
    mut report: Report,
) -> anyhow::Error {
    report.scenes = scene_reports(plan, frozen, None);
    for (i, s) in report.scenes.iter_mut().enumerate() {
        let s = &mut s.result;
        let what: Vec<String> = missing
            .iter()
            .filter(|m| m.scene == i)
            .map(Missing::line)
            .collect();
        if !what.is_empty() {
            s.infra = Some(Infra::NotWarm);
            s.message = Some(what.join("\n"));
        } else if s.outcome == SceneOutcome::NotRun {
            s.infra = Some(Infra::NotWarm);
            s.message = Some("not run: other scenes are not warm, the lock was not taken".into());
        }
    }
    let msg = opts
        .shown
        .not_warm(missing, &plan.store.root, opts.cache_from);
    report.exit_code = Exit::NotWarm.code();
    report.error = Some(msg.clone());
    match opts.sink.write(&report) {
        Ok(()) => anyhow::Error::new(Error::NotWarm(msg)),
        Err(e) => e,
    }
}

/// The end of a device phase whose inner run ran: the report's exit code and error
/// (the scenes infrastructure cut short, or the interrupt), written and shown.
fn finish(opts: &Options, mut report: Report, exit: Exit) -> Result<Exit> {
    report.exit_code = exit.code();
    if exit == Exit::Infra {
        let why: Vec<String> = report
            .scenes
            .iter()
            .map(|s| &s.result)
            .filter(|s| s.infra.is_some())
            .map(|s| format!("{}: {}", s.name, s.message.clone().unwrap_or_default()))
            .collect();
        report.error = Some(format!(
            "infrastructure failed during the device phase:\n  {}",
            why.join("\n  ")
        ));
    } else if exit == Exit::Interrupted {
        report.error = Some("interrupted (SIGINT/SIGTERM)".into());
    }
    opts.sink.write(&report)?;
    opts.sink.show(&report);
    match (exit, &report.error) {
        (Exit::Infra, Some(e)) => Err(crate::base::error::err!(Infra, "{e}")),
        _ => Ok(exit),
    }
}
