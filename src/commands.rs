//! Glue between the command line and the phases: load, plan, then preview, warm or
//! device. Decides nothing the phases decide.

use std::path::PathBuf;

use anyhow::Result;

use crate::cache::{maintain, Store};
use crate::cli::{
    CacheCommand, Cli, Command, DeviceFlags, Format, PreviewFlags, Selection, WarmFlags,
};
use crate::exit::Exit;
use crate::manifest::{self, units};
use crate::plan::{self, Plan};
use crate::report::plan_view::{self, Phases};
use crate::report::term::Ui;
use crate::{device, proc, warm};

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
        Command::Plan(a) => {
            let plan = build(&cli, &a.select)?;
            let phases = Phases {
                warm: true,
                device: true,
            };
            preview(&plan, phases, a.format, ui);
            Ok(Exit::Ok)
        }
        Command::Warm(a) => {
            let plan = build(&cli, &a.select)?;
            let phases = Phases {
                warm: true,
                device: false,
            };
            if let Some(exit) = previewed(&plan, &a.preview, phases, ui) {
                return Ok(exit);
            }
            handle_signals();
            do_warm(&plan, &a.warm, jobs, ui)
        }
        Command::Device(a) => {
            let plan = build(&cli, &a.select)?;
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
            let plan = build(&cli, &a.select)?;
            let phases = Phases {
                warm: true,
                device: true,
            };
            if let Some(exit) = previewed(&plan, &a.preview, phases, ui) {
                return Ok(exit);
            }
            handle_signals();
            let warm_exit = do_warm(&plan, &a.warm, jobs, ui)?;
            // The device phase needs the statuses warm produced: plan again (all hits now,
            // and the stat memo makes it cheap).
            drop(plan);
            let plan = build(&cli, &a.select)?;
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
    let mut m = manifest::load(&cli.manifest)?;
    let cache = plan::cache_dir(&m, cli.cache_dir.as_deref());
    manifest::generated::expand(&mut m, &cache)?;
    Plan::build(m, select, cli.cache_dir.as_deref())
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

fn do_warm(plan: &Plan, w: &WarmFlags, jobs: usize, ui: &Ui) -> Result<Exit> {
    let memory = match &w.memory {
        Some(m) => units::parse_size(m).map_err(|e| crate::coded!(Exit::Usage, "--memory: {e}"))?,
        None => warm::default_memory(),
    };
    let summary = warm::run(plan, &warm::Options { jobs, memory }, ui)?;
    warm::print_summary(&summary, ui);
    Ok(if w.strict && (summary.failed + summary.skipped) > 0 {
        Exit::Failed
    } else {
        Exit::Ok
    })
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
    device::outer::run(plan, &opts, ui)
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
        CacheCommand::Stats => {
            ui.out(&maintain::stats(&store));
            Ok(Exit::Ok)
        }
        CacheCommand::Verify { fix } => {
            let bad = maintain::verify(&store, *fix, &mut |l| ui.out(&format!("{l}\n")))?;
            Ok(if bad > 0 { Exit::Failed } else { Exit::Ok })
        }
        CacheCommand::Prune { max_age, max_size } => {
            store.ensure()?;
            let age = match max_age {
                Some(a) => units::parse_duration(a)
                    .map_err(|e| crate::coded!(Exit::Usage, "--max-age: {e}"))?,
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
