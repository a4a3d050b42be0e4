//! Glue between the command line and the phases: load, plan, then preview, warm or
//! device. Decides nothing the phases decide.

use std::path::PathBuf;

use anyhow::Result;

use crate::cache::{maintain, Store};
use crate::cli::NoScenes;
use crate::cli::{
    CacheCommand, Cli, Command, DeviceFlags, Format, PreviewFlags, Selection, WarmFlags,
};
use crate::exit::Exit;
use crate::manifest::{self, units};
use crate::plan::{self, Plan};
use crate::report::plan_view::{self, Phases};
use crate::report::term::Ui;
use crate::{affected, device, proc, warm};

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
    // Writes beyond `ulimit -f` must fail with EFBIG (exit 3), not kill us with SIGXFSZ.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    if matches!(cli.command, Command::Watchdog) {
        return Ok(if proc::watchdog() == 0 {
            Exit::Ok
        } else {
            Exit::Infra
        });
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
        Command::Explain(a) => {
            let Some(plan) = build_selected(&cli, &a.select, ui)? else {
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
        Command::List(a) => list(&cli, a, ui),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            let mut cmd = Cli::command();
            let mut out = Vec::new();
            clap_complete::generate(*shell, &mut cmd, "scenerun", &mut out);
            ui.out(&String::from_utf8_lossy(&out));
            Ok(Exit::Ok)
        }
        Command::Plan(a) => {
            let Some(plan) = build_selected(&cli, &a.select, ui)? else {
                return Ok(Exit::Ok);
            };
            let phases = Phases {
                warm: true,
                device: true,
            };
            preview(&plan, phases, a.format, ui);
            Ok(Exit::Ok)
        }
        Command::Warm(a) => {
            let Some(plan) = build_selected(&cli, &a.select, ui)? else {
                return Ok(Exit::Ok);
            };
            let phases = Phases {
                warm: true,
                device: false,
            };
            if let Some(exit) = previewed(&plan, &a.preview, phases, ui) {
                return Ok(exit);
            }
            handle_signals();
            do_warm(&plan, &a.warm, jobs, ui).map(|(exit, _)| exit)
        }
        Command::Device(a) => {
            let Some(plan) = build_selected(&cli, &a.select, ui)? else {
                return Ok(Exit::Ok);
            };
            let phases = Phases {
                warm: false,
                device: true,
            };
            if let Some(exit) = previewed(&plan, &a.preview, phases, ui) {
                return Ok(exit);
            }
            handle_signals();
            do_device(&plan, &a.device, ui)
        }
        Command::Run(a) => {
            let Some(plan) = build_selected(&cli, &a.select, ui)? else {
                return Ok(Exit::Ok);
            };
            let phases = Phases {
                warm: true,
                device: true,
            };
            if let Some(exit) = previewed(&plan, &a.preview, phases, ui) {
                return Ok(exit);
            }
            handle_signals();
            let mut plan = plan;
            let (warm_exit, published) = do_warm(&plan, &a.warm, jobs, ui)?;
            // The device phase reads the statuses warm produced: what it published or
            // failed, applied to the same plan.
            plan.apply_warm(&published);
            let exit = do_device(&plan, &a.device, ui)?;
            Ok(exit.max(warm_exit))
        }
        Command::Cache(c) => cache(&cli, c, ui),
        Command::Inner(a) => {
            handle_signals();
            device::inner::main(&a.frozen)
        }
        Command::Watchdog => unreachable!("handled above"),
    }
}

fn build(cli: &Cli, select: &Selection) -> Result<Plan> {
    let m = manifest::load(&cli.manifest)?;
    Plan::build(m, select, cli.cache_dir.as_deref())
}

/// The plan of the selection, narrowed to the affected scenes under `--changed` /
/// `--changed-since`; None when nothing is selected and `--no-scenes=pass` says that is
/// fine (the reason is printed).
fn build_selected(cli: &Cli, select: &Selection, ui: &Ui) -> Result<Option<Plan>> {
    let empty = |e: anyhow::Error| -> Result<Option<Plan>> {
        if select.no_scenes == NoScenes::Pass && crate::exit::exit_of(&e) == Exit::NoneSelected {
            ui.always(&format!("{e} (--no-scenes=pass: nothing to do)"));
            return Ok(None);
        }
        Err(e)
    };
    let plan = match build(cli, select) {
        Ok(p) => p,
        Err(e) => return empty(e),
    };
    if !affected::wanted(select) {
        return Ok(Some(plan));
    }
    let changes = affected::changes(select, &plan.manifest.file, &plan.manifest.dir)?;
    let names = affected::affected(&plan, &changes)?;
    if names.len() == plan.scenes.len() {
        return Ok(Some(plan));
    }
    drop(plan);
    // Plan again with exactly the affected scenes.
    let mut narrowed = select.clone();
    narrowed.affected = Some(names);
    match build(cli, &narrowed) {
        Ok(p) => Ok(Some(p)),
        Err(e) => empty(e),
    }
}

/// `scenerun list`: the selected scenes, with no key computed.
fn list(cli: &Cli, a: &crate::cli::ListArgs, ui: &Ui) -> Result<Exit> {
    let names: Option<Vec<String>> = if affected::wanted(&a.select) {
        match build_selected(cli, &a.select, ui)? {
            Some(p) => Some(p.scenes.iter().map(|s| s.name.clone()).collect()),
            None => return Ok(Exit::Ok),
        }
    } else {
        None
    };
    let m = manifest::load(&cli.manifest)?;
    let selected = match crate::select::select(&m.scenes, &a.select) {
        Ok(s) => s,
        Err(e)
            if a.select.no_scenes == NoScenes::Pass
                && crate::exit::exit_of(&e) == Exit::NoneSelected =>
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

fn preview(plan: &Plan, phases: Phases, format: Format, ui: &Ui) {
    match format {
        Format::Text => ui.out(&plan_view::text(plan, phases, ui)),
        Format::Json => ui.out(&format!(
            "{}\n",
            serde_json::to_string_pretty(&plan_view::json(plan)).expect("plan json")
        )),
    }
}

fn previewed(plan: &Plan, p: &PreviewFlags, phases: Phases, ui: &Ui) -> Option<Exit> {
    if p.plan {
        preview(plan, phases, p.format, ui);
        return Some(Exit::Ok);
    }
    if p.dry_run {
        ui.out(&plan_view::dry_run(plan, phases));
        return Some(Exit::Ok);
    }
    None
}

type Published = Vec<(usize, plan::Status, Option<crate::cache::Entry>)>;

fn do_warm(plan: &Plan, w: &WarmFlags, jobs: usize, ui: &Ui) -> Result<(Exit, Published)> {
    let memory = match &w.memory {
        Some(m) => units::parse_size(m).map_err(|e| crate::coded!(Exit::Usage, "--memory: {e}"))?,
        None => warm::default_memory(),
    };
    let warmed = warm::run(plan, &warm::Options { jobs, memory }, ui)?;
    let summary = &warmed.summary;
    warm::print_summary(summary, ui);
    let exit = if w.strict && (summary.failed + summary.skipped) > 0 {
        Exit::Failed
    } else {
        Exit::Ok
    };
    Ok((exit, warmed.published))
}

fn report_dir(plan: &Plan, d: &DeviceFlags) -> PathBuf {
    match &d.report_dir {
        Some(p) => std::path::absolute(p).unwrap_or_else(|_| p.clone()),
        None => plan.job_dir.clone(),
    }
}

fn do_device(plan: &Plan, d: &DeviceFlags, ui: &Ui) -> Result<Exit> {
    let opts = device::outer::Options {
        no_lock: d.no_lock,
        devices: d.devices.clone().unwrap_or_else(|| "0".into()),
        report_dir: report_dir(plan, d),
    };
    let dir = opts.report_dir.clone();
    let called = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let result = device::outer::run(plan, &opts, ui);
    // The trace's device part, from the report this run wrote (on every ending).
    if let Err(e) = crate::report::trace::write_device(&dir, called, ui.github) {
        ui.info(&format!("warning: cannot write the trace: {e}"));
    }
    result
}

fn cache(cli: &Cli, c: &CacheCommand, ui: &Ui) -> Result<Exit> {
    let (root, cfg) = match manifest::load(&cli.manifest) {
        Ok(m) => (plan::cache_dir(&m, cli.cache_dir.as_deref()), Some(m.cache)),
        Err(e) => match &cli.cache_dir {
            Some(d) => (std::path::absolute(d)?, None),
            None => return Err(e.into()),
        },
    };
    let store = Store::at(root);
    match c {
        CacheCommand::Stats { format } => {
            if !store.root.is_dir() {
                return Err(crate::coded!(
                    Exit::Infra,
                    "cache directory {} does not exist",
                    store.root.display()
                )
                .context("cache stats"));
            }
            match format {
                Format::Text => ui.out(&maintain::stats(&store)),
                Format::Json => ui.out(&format!(
                    "{}\n",
                    serde_json::to_string_pretty(&maintain::stats_json(&store)).expect("json")
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
            let age = match max_age {
                Some(a) => {
                    units::parse_age(a).map_err(|e| crate::coded!(Exit::Usage, "--max-age: {e}"))?
                }
                None => cfg
                    .as_ref()
                    .map(|c| c.max_age)
                    .unwrap_or(manifest::DEFAULT_MAX_AGE),
            };
            let size = match max_size {
                Some(s) => Some(
                    units::parse_size(s)
                        .map_err(|e| crate::coded!(Exit::Usage, "--max-size: {e}"))?,
                ),
                None => cfg.as_ref().and_then(|c| c.max_size),
            };
            maintain::prune(&store, age, size, &mut |l| ui.out(&format!("{l}\n")))?;
            Ok(Exit::Ok)
        }
        CacheCommand::Clean => {
            let n = maintain::clean(&store)?;
            ui.out(&format!(
                "removed {n} entries from {}\n",
                store.root.display()
            ));
            Ok(Exit::Ok)
        }
    }
}
