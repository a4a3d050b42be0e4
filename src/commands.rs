//! Glue between the command line and the phases: load, plan, then preview, warm or
//! device. Decides nothing the phases decide.

use std::path::PathBuf;

use anyhow::{Context, Result};

use std::sync::Arc;

use crate::base::error::Error;
use crate::base::exit::Exit;
use crate::base::proc;
use crate::base::ui::{Format, Ui};
use crate::cache::remote::{self, Remote};
use crate::cache::{maintain, Store};
use crate::cli::{
    CacheCommand, Cli, Command, DeviceFlags, FleetCommand, PreviewFlags, SimulateArgs, WarmFlags,
};
use crate::manifest;
use crate::plan::{self, Lookups, Plan};
use crate::report::plan_view::{self, Phases};
use crate::select::{NoScenes, Selection};
use crate::{affected, device, warm};

fn on_signal(_sig: i32) {
    proc::interrupt_all();
    if !HANDLES_SIGNALS.load(std::sync::atomic::Ordering::SeqCst) {
        std::process::exit(Exit::Interrupted.code());
    }
}

/// Set by phases that clean up and exit 2 on their own.
static HANDLES_SIGNALS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn handle_signals() {
    HANDLES_SIGNALS.store(true, std::sync::atomic::Ordering::SeqCst);
}

pub fn dispatch(cli: Cli, ui: &Ui) -> Result<Exit> {
    let reports = device_report_dir(&cli);
    let result = dispatch_command(cli, ui);
    // A usage error or an empty selection writes no report: at least no earlier run's
    // report may stay looking current.
    if let (Err(e), Some(dir)) = (&result, reports) {
        if matches!(
            crate::base::error::exit_of(e),
            Exit::Usage | Exit::NoneSelected
        ) {
            device::runs::clear_stale_reports(&dir);
        }
    }
    result
}

/// Where `device` or `run` would write its report, guessed without the manifest (which
/// may be what is broken).
fn device_report_dir(cli: &Cli) -> Option<PathBuf> {
    let d = match &cli.command {
        Command::Device(a) => &a.device,
        Command::Run(a) => &a.device,
        _ => return None,
    };
    if let Some(p) = &d.report_dir {
        return std::path::absolute(p).ok();
    }
    let dir = manifest::dir_of(&cli.manifest).ok()?;
    Some(crate::base::layout::job_dir(&dir))
}

fn dispatch_command(cli: Cli, ui: &Ui) -> Result<Exit> {
    // Writes beyond `ulimit -f` must fail with EFBIG (exit 3), not kill us with SIGXFSZ.
    // SAFETY: SIG_IGN installs no handler code; done before any thread starts.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    if matches!(cli.command, Command::Watchdog) {
        return Ok(if proc::watchdog() == 0 {
            Exit::Ok
        } else {
            Exit::Infra
        });
    }
    if let Command::Cc(call) = &cli.command {
        // The compiler's own status, whatever it is: scenerun's codes mean nothing to
        // the test that started the compile.
        std::process::exit(crate::compiled::run(call));
    }
    proc::install_signal_thread(on_signal);
    let jobs = cli
        .jobs
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
        .max(1);
    match &cli.command {
        Command::Explain(a) => explain(&cli, a, ui),
        Command::List(a) => list(&cli, a, ui),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            let mut cmd = Cli::command();
            let mut out = Vec::new();
            clap_complete::generate(*shell, &mut cmd, "scenerun", &mut out);
            ui.out(&String::from_utf8_lossy(&out));
            Ok(Exit::Ok)
        }
        Command::Plan(a) => plan_command(&cli, a, jobs, ui),
        Command::Warm(a) => warm_command(&cli, a, jobs, ui),
        Command::Device(a) => device_command(&cli, a, ui),
        Command::Run(a) => run_command(&cli, a, jobs, ui),
        Command::Cache(c) => cache(&cli, c, ui),
        Command::Fleet(FleetCommand::Simulate(a)) => fleet_simulate(&cli, a, ui),
        Command::Inner(a) => {
            handle_signals();
            device::inner::main(&a.frozen, crate::report::notice::inner_say)
        }
        Command::Watchdog | Command::Cc(_) => unreachable!("handled above"),
    }
}

/// `scenerun explain`: why each step that is not a hit will run.
fn explain(cli: &Cli, a: &crate::cli::ExplainArgs, ui: &Ui) -> Result<Exit> {
    let Some(plan) = build_selected(cli, &a.select.selection(), None, Lookups::Look, ui)? else {
        return Ok(Exit::Ok);
    };
    match a.format {
        Format::Text => ui.out(&crate::explain::text(&plan)),
        Format::Json => ui.out(&format!(
            "{}\n",
            serde_json::to_string_pretty(&crate::explain::json(&plan)).expect("json")
        )),
    }
    Ok(Exit::Ok)
}

/// `scenerun plan`: both phases previewed.
fn plan_command(cli: &Cli, a: &crate::cli::PlanArgs, jobs: usize, ui: &Ui) -> Result<Exit> {
    let sel = a.select.selection();
    let Some(mut plan) = build_selected(cli, &sel, Some(&a.device), Lookups::Look, ui)? else {
        return Ok(Exit::Ok);
    };
    // The hints as written, unless a runner's slots were named.
    if cli.jobs.is_some() {
        plan.fit_threads(jobs);
    }
    let phases = Phases {
        warm: true,
        device: true,
    };
    preview(&mut plan, phases, a.format, ui)?;
    // The process ends here: freeing a 20,000-step plan piece by piece is a few
    // percent of a big plan's time for nothing.
    std::mem::forget(plan);
    Ok(Exit::Ok)
}

/// `scenerun warm` (or its preview).
fn warm_command(cli: &Cli, a: &crate::cli::WarmArgs, jobs: usize, ui: &Ui) -> Result<Exit> {
    let (sel, mode) = (a.select.selection(), settle_unless(&a.preview));
    let Some(mut plan) = build_selected(cli, &sel, None, mode, ui)? else {
        return Ok(Exit::Ok);
    };
    fit_runner(&mut plan, &a.warm, jobs);
    let phases = Phases {
        warm: true,
        device: false,
    };
    if let Some(exit) = previewed(&mut plan, &a.preview, phases, ui)? {
        return Ok(exit);
    }
    handle_signals();
    let exit = do_warm(&plan, &a.warm, jobs, ui).map(|(exit, _)| exit);
    // The process ends next: freeing 20,000 steps' strings one by one is wasted
    // work (as for `plan`); the OS takes the pages back at once.
    std::mem::forget(plan);
    exit
}

/// The plan of a command with a device phase; None (an empty selection that passes)
/// also clears an earlier run's report, so none stays looking current.
fn device_plan(
    cli: &Cli,
    sel: &Selection,
    d: &DeviceFlags,
    mode: Lookups,
    ui: &Ui,
) -> Result<Option<Plan>> {
    let plan = build_selected(cli, sel, Some(d), mode, ui)?;
    if plan.is_none() {
        if let Some(dir) = device_report_dir(cli) {
            device::runs::clear_stale_reports(&dir);
        }
    }
    Ok(plan)
}

/// `scenerun device` (or its preview).
fn device_command(cli: &Cli, a: &crate::cli::DeviceArgs, ui: &Ui) -> Result<Exit> {
    let sel = a.select.selection();
    let Some(mut plan) = device_plan(cli, &sel, &a.device, Lookups::Look, ui)? else {
        return Ok(Exit::Ok);
    };
    let phases = Phases {
        warm: false,
        device: true,
    };
    if let Some(exit) = previewed(&mut plan, &a.preview, phases, ui)? {
        return Ok(exit);
    }
    handle_signals();
    do_device(cli, &plan, &a.device, ui)
}

/// What a warm runs on: `jobs` slots (no step's `threads` asks for more), workers or
/// not (`--no-workers`); previews show the same.
fn fit_runner(plan: &mut Plan, w: &WarmFlags, jobs: usize) {
    plan.fit_threads(jobs);
    if w.no_workers {
        plan.no_workers();
    }
}

/// `scenerun run`: warm, then device on the same plan (or their preview).
fn run_command(cli: &Cli, a: &crate::cli::RunArgs, jobs: usize, ui: &Ui) -> Result<Exit> {
    let (sel, mode) = (a.select.selection(), settle_unless(&a.preview));
    let Some(mut plan) = device_plan(cli, &sel, &a.device, mode, ui)? else {
        return Ok(Exit::Ok);
    };
    fit_runner(&mut plan, &a.warm, jobs);
    let phases = Phases {
        warm: true,
        device: true,
    };
    if let Some(exit) = previewed(&mut plan, &a.preview, phases, ui)? {
        return Ok(exit);
    }
    handle_signals();
    let (warm_exit, published) = do_warm(&plan, &a.warm, jobs, ui)?;
    // The device phase reads the statuses warm produced: what it published or
    // failed, applied to the same plan.
    plan.apply_warm(&published);
    let exit = do_device(cli, &plan, &a.device, ui)?;
    Ok(exit.max(warm_exit))
}

/// The manifest to load, or why there is none: where the search upwards went when no
/// `--manifest` was given, or what the given path is instead (exit 4).
fn manifest_path(cli: &Cli) -> Result<&std::path::Path, Error> {
    use crate::base::error::NoManifest;
    match std::fs::metadata(&cli.manifest) {
        Ok(m) if m.is_dir() => Err(Error::NoManifest(NoManifest::Directory(
            cli.manifest.clone(),
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(Error::NoManifest(match &cli.manifest_search {
                Some(stopped) => NoManifest::NotFound {
                    name: cli.manifest.clone(),
                    from: std::env::current_dir().unwrap_or_default(),
                    stopped: stopped.clone(),
                },
                None => NoManifest::Missing(cli.manifest.clone()),
            }))
        }
        _ => Ok(&cli.manifest),
    }
}

fn build(cli: &Cli, select: &Selection, mode: Lookups, ui: &Ui) -> Result<Plan> {
    manifest_path(cli)?;
    // The stat memo (a file beside the manifest, megabytes on a big suite) is read on
    // another thread while the manifest parses: its place is known before the manifest.
    // The identity commands start as soon as the manifest is in, while it still reads;
    // `Plan::build` waits for their results, and the scope for their threads only at
    // its end (it had waited for them before planning began).
    let plan = std::thread::scope(|s| {
        let memo = s.spawn(|| {
            manifest::dir_of(&cli.manifest)
                .ok()
                .map(|d| plan::stat_memo(&d))
        });
        let loaded = manifest::load_deferred(&cli.manifest, cli.profile.as_deref());
        if let Ok((m, _)) = &loaded {
            plan::start_identities(s, m, select);
        }
        let memo = memo.join();
        let (mut m, kept) = loaded.map_err(Error::Manifest)?;
        let files = match memo {
            Ok(Some(f)) => f,
            _ => plan::stat_memo(&m.dir),
        };
        // A manifest parsed from its text is kept for the next run by another thread
        // while this one plans (from a copy: generated scenes join this one, they are
        // not kept).
        if let Some(kept) = kept {
            let copy = m.clone();
            s.spawn(move || kept.write(&copy));
        }
        // Said where the cache is first checked, as that check would have: before the
        // generators read it, else once the plan has checked it.
        let generates = !m.generators.is_empty();
        if generates {
            say_exposed(
                ui,
                &Store::at(plan::cache_dir(&m, cli.cache_dir.as_deref())),
            );
        }
        add_generated(cli, &mut m, &files)?;
        let built = Plan::build(m, select, cli.cache_dir.as_deref(), files, mode);
        if let (false, Ok(p)) = (generates, &built) {
            say_exposed(ui, &p.store);
        }
        built
    });
    let mut plan = plan?;
    let notes: Arc<dyn crate::base::notice::Tell> = Arc::new(ui.clone());
    plan.remote = Remote::configure(
        &plan.manifest.cache.remote,
        &cli.remote.flags(),
        plan.store.keys.clone(),
        notes,
    )?
    .map(Arc::new);
    Ok(plan)
}

/// The cache's own warning when other users can write to it (once per cache), said
/// before anything reads it.
fn say_exposed(ui: &Ui, store: &Store) {
    if let Some(x) = store.exposed() {
        crate::report::notice::say(ui, &crate::base::notice::Notice::CacheExposed(x));
    }
}

/// Generated scenes are scenes: `scenes_from:` output joins the manifest's scenes, for
/// `plan`, `warm`, `device` and `list` alike (a generator runs only when its output for
/// these inputs is not cached yet).
fn add_generated(cli: &Cli, m: &mut manifest::Manifest, files: &crate::key::Files) -> Result<()> {
    let cache = plan::cache_dir(m, cli.cache_dir.as_deref());
    plan::scenes_from::expand(m, &cache, files).map(drop)
}

/// The plan of the selection, narrowed to the affected scenes under `--changed` /
/// `--changed-since`; None when nothing is selected and `--no-scenes=pass` says that is
/// fine (the reason is printed). For a command with a device phase and `--no-lock`, the
/// plan runs on the given ids, so `plan`, `--plan` and `--dry-run` show what `--no-lock`
/// will do (no lock command, packing on these ids).
fn build_selected(
    cli: &Cli,
    select: &Selection,
    device: Option<&DeviceFlags>,
    mode: Lookups,
    ui: &Ui,
) -> Result<Option<Plan>> {
    let empty = |e: anyhow::Error| -> Result<Option<Plan>> {
        if select.no_scenes == NoScenes::Pass
            && crate::base::error::exit_of(&e) == Exit::NoneSelected
        {
            ui.always(&format!("{e} (--no-scenes=pass: nothing to do)"));
            return Ok(None);
        }
        Err(e)
    };
    let on_ids = |mut plan: Plan| {
        if let Some(d) = device.filter(|d| d.no_lock) {
            plan.no_lock(no_lock_ids(d));
        }
        Some(plan)
    };
    // Under --changed, the first plan only names the affected scenes: it looks only.
    let first = match affected::wanted(select) {
        true => Lookups::Look,
        false => mode,
    };
    let plan = match build(cli, select, first, ui) {
        Ok(p) => p,
        Err(e) => return empty(e),
    };
    if !affected::wanted(select) {
        return Ok(on_ids(plan));
    }
    let changes = affected::changes(select, &plan.manifest.file, &plan.manifest.dir)?;
    let names = affected::affected(&plan, &changes)?;
    if names.len() == plan.scenes.len() {
        return Ok(on_ids(plan));
    }
    drop(plan);
    // Plan again with exactly the affected scenes.
    let mut narrowed = select.clone();
    narrowed.affected = Some(names);
    match build(cli, &narrowed, mode, ui) {
        Ok(p) => Ok(on_ids(p)),
        Err(e) => empty(e),
    }
}

/// `scenerun list`: the selected scenes, with no key computed.
fn list(cli: &Cli, a: &crate::cli::ListArgs, ui: &Ui) -> Result<Exit> {
    let sel = a.select.selection();
    let names: Option<Vec<String>> = if affected::wanted(&sel) {
        match build_selected(cli, &sel, None, Lookups::Look, ui)? {
            Some(p) => Some(p.scenes.iter().map(|s| s.name.clone()).collect()),
            None => return Ok(Exit::Ok),
        }
    } else {
        None
    };
    let mut m =
        manifest::load_as(manifest_path(cli)?, cli.profile.as_deref()).map_err(Error::Manifest)?;
    let files = plan::stat_memo(&m.dir);
    add_generated(cli, &mut m, &files)?;
    crate::select::check_selections(&m, &sel)?;
    let selected = match crate::select::select(&m.scenes, &sel) {
        Ok(s) => s,
        Err(e)
            if sel.no_scenes == NoScenes::Pass
                && crate::base::error::exit_of(&e) == Exit::NoneSelected =>
        {
            ui.always(&format!("{e} (--no-scenes=pass: nothing to do)"));
            return Ok(Exit::Ok);
        }
        Err(e) => return Err(e),
    };
    let scenes: Vec<&manifest::Scene> = selected
        .iter()
        .map(|&i| &m.scenes[i])
        .filter(|s| names.as_ref().is_none_or(|n| n.contains(&s.name)))
        .collect();
    ui.out(&crate::report::list::render(&scenes, a.format));
    Ok(Exit::Ok)
}

fn no_lock_ids(d: &DeviceFlags) -> Vec<String> {
    d.devices
        .clone()
        .map(|ids| ids.0)
        .unwrap_or_else(|| vec!["0".into()])
}

fn preview(plan: &mut Plan, phases: Phases, format: Format, ui: &Ui) -> Result<()> {
    plan.mark_remote_hits()?;
    let plan = &*plan;
    match format {
        Format::Text => ui.out(&plan_view::text(plan, phases, ui)),
        Format::Json => ui.out(&format!(
            "{}\n",
            serde_json::to_string_pretty(&plan_view::json(plan)).expect("plan json")
        )),
    }
    Ok(())
}

/// A warm that will run settles its hits as the plan finds them; a preview only looks.
fn settle_unless(p: &PreviewFlags) -> Lookups {
    match p.plan || p.dry_run {
        true => Lookups::Look,
        false => Lookups::Settle,
    }
}

fn previewed(plan: &mut Plan, p: &PreviewFlags, phases: Phases, ui: &Ui) -> Result<Option<Exit>> {
    if p.plan {
        preview(plan, phases, p.format, ui)?;
        return Ok(Some(Exit::Ok));
    }
    if p.dry_run {
        ui.out(&plan_view::dry_run(plan, phases));
        return Ok(Some(Exit::Ok));
    }
    Ok(None)
}

type Published = Vec<(
    usize,
    plan::Status,
    Option<std::sync::Arc<crate::cache::Entry>>,
)>;

fn do_warm(plan: &Plan, w: &WarmFlags, jobs: usize, ui: &Ui) -> Result<(Exit, Published)> {
    unsigned_warm(plan)?;
    let memory = w.memory.unwrap_or_else(warm::default_memory);
    let trace = |spans: &[warm::accum::Span]| crate::report::trace::write_warm(plan, spans);
    let opts = warm::Options {
        jobs,
        memory,
        trace: &trace,
    };
    let mut reporter = crate::report::warm::Reporter::new(ui);
    let warmed = warm::run(plan, &opts, &mut reporter)?;
    let summary = &warmed.summary;
    crate::report::warm::print_summary(summary, ui);
    say_where(
        ui,
        "warm records",
        &plan.job_dir,
        &["warm.json", "trace.json"],
    );
    let exit = if w.strict && (summary.failed + summary.skipped) > 0 {
        Exit::Failed
    } else {
        Exit::Ok
    };
    Ok((exit, warmed.published))
}

/// With `signing.verify: [local]`, an entry this process cannot sign would be a miss for every
/// reader, this job's own device phase included: a warm that would add one without the
/// signing key is a usage error before it builds anything (exit 4).
fn unsigned_warm(plan: &Plan) -> Result<()> {
    let keys = &plan.store.keys;
    if !keys.verifies() || keys.signs() {
        return Ok(());
    }
    let adds = plan
        .steps
        .iter()
        .any(|s| s.persist && !matches!(s.status, crate::plan::Status::Hit));
    if !adds {
        return Ok(());
    }
    Err(crate::base::error::err!(
        Usage,
        "signing.verify_key is set for local entries, so every entry must be signed, and {} holds no signing key: this warm would add entries no reader serves (run it with the key, or only read this cache)",
        keys.sign_env()
            .map(|e| format!("${e}"))
            .unwrap_or_else(|| "signing.key_env (unset)".into())
    ))
}

fn report_dir(plan: &Plan, d: &DeviceFlags) -> PathBuf {
    crate::base::layout::report_dir(d.report_dir.as_deref(), &plan.job_dir)
}

/// Which setting chose the cache dir.
fn cache_from(cli: &Cli, m: &manifest::Manifest) -> crate::base::layout::CacheFrom {
    crate::base::layout::CacheFrom::of(
        cli.cache_dir.as_deref(),
        cli.cache_dir_from_env,
        m.cache.dir.is_some(),
    )
}

fn do_device(cli: &Cli, plan: &Plan, d: &DeviceFlags, ui: &Ui) -> Result<Exit> {
    let dir = report_dir(plan, d);
    let sink = crate::report::Writer {
        dir: dir.clone(),
        ui,
        started: device::unix_now(),
    };
    let opts = device::outer::Options {
        no_lock: d.no_lock,
        devices: no_lock_ids(d),
        report_dir: dir.clone(),
        sink: &sink,
        cache_from: cache_from(cli, &plan.manifest),
        shown: ui,
    };
    let result = device::outer::run(plan, &opts);
    let files = ["report.json", "junit.xml", "trace.json", "logs/"];
    say_where(ui, "reports", &dir, &files);
    result
}

/// Where a phase left its reports, one line on stderr (not under `-q`): they are beside
/// the manifest (or in `--report-dir`), not in the current directory.
fn say_where(ui: &Ui, what: &str, dir: &std::path::Path, files: &[&str]) {
    let present: Vec<&str> = files
        .iter()
        .copied()
        .filter(|f| dir.join(f).exists())
        .collect();
    if !present.is_empty() {
        ui.info(&format!(
            "{what}: {}/ ({})",
            dir.display(),
            present.join(", ")
        ));
    }
}

fn cache(cli: &Cli, c: &CacheCommand, ui: &Ui) -> Result<Exit> {
    let loaded = manifest_path(cli)
        .map_err(anyhow::Error::new)
        .and_then(|p| manifest::load(p).map_err(|e| Error::Manifest(e).into()));
    let (root, cfg) = match loaded {
        Ok(m) => (plan::cache_dir(&m, cli.cache_dir.as_deref()), Some(m.cache)),
        Err(e) => match &cli.cache_dir {
            Some(d) => (std::path::absolute(d)?, None),
            None => return Err(e),
        },
    };
    let store = Store::at(root);
    say_exposed(ui, &store);
    match c {
        CacheCommand::Stats { format } => {
            if !store.root.is_dir() {
                return Err(crate::base::error::err!(
                    Infra,
                    "cache directory {} does not exist",
                    store.root.display()
                )
                .context("cache stats"));
            }
            match format {
                Format::Text => {
                    ui.out(&maintain::stats(&store)?);
                    ui.out(&remote::stats_text(&store));
                }
                Format::Json => ui.out(&format!(
                    "{}\n",
                    serde_json::to_string_pretty(&maintain::stats_json(&store)?).expect("json")
                )),
            }
            Ok(Exit::Ok)
        }
        CacheCommand::Verify { fix } => {
            let bad = maintain::verify(&store, *fix, &mut |l| ui.out(&format!("{l}\n")))?;
            Ok(if bad > 0 { Exit::Failed } else { Exit::Ok })
        }
        CacheCommand::Prune { max_age, max_size } => {
            store.ensure()?;
            let age = max_age.unwrap_or_else(|| {
                cfg.as_ref()
                    .map(|c| c.max_age)
                    .unwrap_or(manifest::DEFAULT_MAX_AGE)
            });
            let size = max_size.or_else(|| cfg.as_ref().and_then(|c| c.max_size));
            maintain::prune(&store, age, size, &mut |n| {
                ui.out(&format!("{}\n", crate::report::notice::line(&n).0))
            })?;
            Ok(Exit::Ok)
        }
        CacheCommand::Clean => {
            let done = maintain::clean(&store)?;
            for e in &done.in_use {
                ui.out(&format!("in use, kept: {e}\n"));
            }
            ui.out(&format!(
                "removed {} entries from {}{}\n",
                done.removed,
                store.root.display(),
                match done.in_use.len() {
                    0 => String::new(),
                    n => format!("; kept {n} in use by another scenerun"),
                }
            ));
            Ok(Exit::Ok)
        }
    }
}

/// `scenerun fleet simulate`: job shapes from the flags or from report dirs, then the
/// simulation, printed and (with `--svg`) drawn.
fn fleet_simulate(cli: &Cli, a: &SimulateArgs, ui: &Ui) -> Result<Exit> {
    use crate::fleet::{self, shapes, Setup, Source};
    let source = match a.hold {
        Some(hold) => Source::Given {
            hold,
            cards_per_job: a.cards_per_job,
        },
        None => {
            let runs = a
                .from_reports
                .iter()
                .map(|dir| {
                    let ctx = shapes::context(dir, &cli.manifest, cli.cache_dir.as_deref());
                    for note in &ctx.notes {
                        ui.info(&format!("note: {note}"));
                    }
                    let work = shapes::read_run(dir, &ctx)
                        .map_err(|e| crate::base::error::err!(Usage, "--from-reports: {e}"))?;
                    Ok(shapes::shape(&work, a.old_acquisitions as usize))
                })
                .collect::<Result<Vec<_>>>()?;
            Source::Runs {
                runs,
                compare: a.compare,
            }
        }
    };
    let setup = Setup {
        cards: a.cards,
        jobs: a.jobs,
        arrival: a.arrival,
        seed: a.seed,
        source,
        timeline: a.svg.is_some(),
    };
    let results = fleet::run(&setup).map_err(|e| crate::base::error::err!(Usage, "{e}"))?;
    if let Some(path) = &a.svg {
        let svg = fleet::chart::svg(&setup, &results)
            .map_err(|e| anyhow::anyhow!("drawing the chart: {e}"))?;
        crate::base::fsutil::write_atomic(path, svg.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    match a.format {
        Format::Text => ui.out(&fleet::render::text(&setup, &results)),
        Format::Json => ui.out(&fleet::render::json(&setup, &results)),
    }
    Ok(Exit::Ok)
}
