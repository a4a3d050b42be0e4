//! `--plan` output (text and versioned JSON) and `--dry-run` command listings. Both read
//! the plan only; neither runs nor writes anything.

use std::collections::BTreeMap;

use serde::Serialize;
use std::fmt::Write as _;

use crate::base::ui::Ui;
use crate::base::units::count;
use crate::device::packing::input::PreviewProcess;
use crate::plan::{Fill, Plan, Status};

pub const PLAN_SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Copy)]
pub struct Phases {
    pub warm: bool,
    pub device: bool,
}

struct Packing {
    procs: Vec<PreviewProcess>,
    makespan: f64,
}

fn packing(plan: &Plan) -> Packing {
    let runnable: Vec<usize> = (0..plan.scenes.len())
        .filter(|&i| {
            let ps = &plan.scenes[i];
            ps.device.is_some() && !scene_failed(plan, i) && !too_wide(plan, i)
        })
        .collect();
    let procs = crate::device::packing::input::preview(plan, &runnable);
    let makespan = procs.iter().map(|p| p.end).fold(0.0, f64::max);
    Packing { procs, makespan }
}

/// For each process (sorted by start), up to `SHOWN` processes that run beside it, and
/// whether there are more: a sweep that keeps only the processes still running, so a
/// big suite costs n × ids, not n².
fn neighbours(procs: &[PreviewProcess]) -> Vec<(Vec<usize>, bool)> {
    const SHOWN: usize = 4;
    let mut out = vec![(Vec::new(), false); procs.len()];
    let mut active: Vec<usize> = Vec::new();
    for k in 0..procs.len() {
        let pr = &procs[k];
        active.retain(|&j| procs[j].end > pr.start);
        let mut near: Vec<usize> = active.clone();
        for (j, o) in procs.iter().enumerate().skip(k + 1) {
            if o.start >= pr.end || near.len() > SHOWN {
                break;
            }
            near.push(j);
        }
        let more = near.len() > SHOWN;
        near.truncate(SHOWN);
        out[k] = (near, more);
        active.push(k);
    }
    out
}

/// How the preview names a process: its scene, or its lane (with the variant it runs,
/// when not the plain one) and its number of scenes.
fn process_name(plan: &Plan, p: &PreviewProcess) -> String {
    match &p.lane {
        None => plan.scenes[p.scenes[0]].name.clone(),
        Some(l) => match variant_of(plan, p).filter(|v| !v.is_plain()) {
            Some(v) => format!(
                "lane {l} [{}] ({})",
                v.describe(),
                count(p.scenes.len(), "scene")
            ),
            None => format!("lane {l} ({})", count(p.scenes.len(), "scene")),
        },
    }
}

/// The lane process variant a preview process runs (its scenes share it).
fn variant_of<'a>(plan: &'a Plan, p: &PreviewProcess) -> Option<&'a crate::manifest::Variant> {
    plan.scenes[p.scenes[0]].device.as_ref()?.run.variant()
}

/// A scene that needs more ids than `--no-lock --devices` gives: the inner run fails it
/// without running it, so it is not packed.
fn too_wide(plan: &Plan, i: usize) -> bool {
    plan.scenes[i]
        .device
        .as_ref()
        .is_some_and(|d| d.devices > plan.device_count)
}

fn scene_failed(plan: &Plan, i: usize) -> bool {
    let ps = &plan.scenes[i];
    ps.kernels
        .iter()
        .chain(&ps.fixture)
        .chain(&ps.golden)
        .chain(&ps.prepare)
        .any(|&s| matches!(plan.steps[s].status, Status::Failed(_)))
}

fn status_text(plan: &Plan, i: usize, why: Option<&str>) -> String {
    let s = &plan.steps[i];
    let scope = if s.persist { "" } else { " (job-scoped)" };
    match (&s.status, why) {
        // The one word of `scenerun explain`: why this miss.
        (Status::Miss, Some(w)) => format!("miss ({w}){scope}"),
        _ => format!("{}{scope}", s.status.word()),
    }
}

/// A process of the `--plan` preview: its scene (or lane and scenes), ids, slots,
/// start, what runs beside it, and its order when it is not `any`.
fn process_lines(
    plan: &Plan,
    procs: &[PreviewProcess],
    pr: &PreviewProcess,
    (near, more): &(Vec<usize>, bool),
) -> String {
    let slots = pr
        .slots
        .iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let mode = if pr.exclusive {
        "alone (exclusive)".to_string()
    } else if near.is_empty() {
        "alone".into()
    } else {
        format!(
            "beside {}{}",
            near.iter()
                .map(|&j| process_name(plan, &procs[j]))
                .collect::<Vec<_>>()
                .join(", "),
            if *more { " and more" } else { "" }
        )
    };
    let order = match pr.order {
        crate::manifest::Order::Any => String::new(),
        o => format!("order {}, ", o.word()),
    };
    let ids = format!(
        "{} id{}",
        pr.devices,
        if pr.devices == 1 { " " } else { "s" }
    );
    let head = |name: &str| {
        format!(
            "  {name:<24} {ids}  slots {slots:<8} +{:.1}s  {order}{mode}\n",
            pr.start
        )
    };
    match &pr.lane {
        None => head(&plan.scenes[pr.scenes[0]].name),
        Some(lane) => {
            let mut out = head(&process_name(plan, pr));
            out.push_str(&format!(
                "      one process{}, start-up {}: {}\n",
                if pr.prestart {
                    ", started before the lock"
                } else {
                    ""
                },
                pr.startup
                    .map(|s| format!("~{s:.1}s"))
                    .unwrap_or_else(|| "not measured yet".into()),
                pr.scenes
                    .iter()
                    .map(|&i| plan.scenes[i].name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            if let Some(notes) = lane_notes(plan, lane) {
                out.push_str(&format!("      {notes}\n"));
            }
            if let Some(fork) = fork_line(plan, lane) {
                out.push_str(&format!("      {fork}\n"));
            }
            out
        }
    }
}

/// What a lane does besides running its batch, for the preview: when it restarts a
/// poisoned runtime and what it sends before SIGTERM.
fn lane_notes(plan: &Plan, lane: &str) -> Option<String> {
    let cfg = plan.manifest.lanes.get(lane)?;
    let mut notes = Vec::new();
    if let Some(r) = &cfg.restart_on {
        let on: Vec<String> = r
            .exit_codes
            .iter()
            .map(|c| format!("exit status {c}"))
            .chain(r.patterns.iter().map(|p| format!("output /{p}/")))
            .chain(["a restart line".to_string()])
            .collect();
        notes.push(format!(
            "restarts (same ids, at most {}): {}",
            cfg.max_restarts,
            on.join(", ")
        ));
    }
    if let Some(stop) = &cfg.stop {
        notes.push(format!(
            "stop: {}, {}, then SIGTERM",
            stop.signal_name(),
            crate::base::units::short_duration(stop.wait)
        ));
    }
    (!notes.is_empty()).then(|| notes.join("; "))
}

/// Whether a lane's processes fork from the fork server, or why they run as written
/// (docs/lanes.md, "A fork server"): the one answer the text plan's line and the JSON
/// plan's `fork` field both render.
#[derive(Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
struct ForkJson {
    /// True: the lane's processes fork from the fork server.
    forked: bool,
    /// Why they run as written instead (null when forked): the words of `--plan`.
    reason: Option<String>,
}

/// `ForkJson` of `lane`; None when the manifest has no fork server or the lane does not
/// ask it (its command is not `scenerun_pytest fork`).
fn fork_of(plan: &Plan, lane: &str) -> Option<ForkJson> {
    let server = plan.manifest.fork_server.as_ref()?;
    let cfg = plan.manifest.lanes.get(lane)?;
    let reason = crate::device::lane::fork_server::refusal(server, &plan.manifest.env, cfg)?;
    Some(ForkJson {
        forked: reason.is_none(),
        reason,
    })
}

/// The text plan's line for `fork_of`.
fn fork_line(plan: &Plan, lane: &str) -> Option<String> {
    Some(match fork_of(plan, lane)?.reason {
        None => "forked from the fork server (with the lane's umask, limits, niceness, CPU affinity, directory and environment)".into(),
        Some(why) => format!("runs as written, not forked from the fork server: {why}"),
    })
}

pub fn text(plan: &Plan, phases: Phases, ui: &Ui) -> String {
    let m = &plan.manifest;
    let mut out = format!(
        "plan: {} — {} of {} selected\ncache: {}\n",
        m.file.display(),
        plan.scenes.len(),
        count(m.scenes.len(), "scene"),
        plan.store.root.display()
    );
    selections_text(plan, &mut out);
    if ui.verbose > 0 {
        for n in &m.notes {
            out.push_str(&format!("note: {n}\n"));
        }
    }
    if phases.warm {
        warm_text(plan, ui, &mut out);
    }
    if phases.device {
        device_text(plan, &mut out);
    }
    out
}

/// With `selections:`: the profile in use, and each selection with its selected scenes
/// (its order, when it has one).
fn selections_text(plan: &Plan, out: &mut String) {
    let m = &plan.manifest;
    if let Some(p) = &m.profile {
        out.push_str(&format!("profile: {p}\n"));
    }
    for sel in &m.selections {
        let n = plan
            .scenes
            .iter()
            .filter(|ps| m.scenes[ps.index].selection.as_ref() == Some(&sel.name))
            .count();
        let order = sel
            .order
            .map(|o| format!(", order {}", o.word()))
            .unwrap_or_default();
        out.push_str(&format!(
            "selection {}: {} selected{order}\n",
            sel.name,
            count(n, "scene")
        ));
    }
}

/// The warm part: the counts, then one line per step with its status and estimate
/// (and why, under a stale or failed one).
fn warm_text(plan: &Plan, ui: &Ui, out: &mut String) {
    let hits = plan.steps.iter().filter(|s| s.status.is_hit()).count();
    let failed = plan
        .steps
        .iter()
        .filter(|s| matches!(s.status, Status::Failed(_)))
        .count();
    let todo: f64 = plan
        .steps
        .iter()
        .filter(|s| !s.status.is_hit())
        .map(|s| s.estimate.unwrap_or(0.0))
        .sum();
    let remote = plan
        .steps
        .iter()
        .filter(|s| s.status == Status::RemoteHit)
        .count();
    out.push_str(&format!(
        "\nwarm: {} steps ({} unique keys): {hits} hit, {}{} to build{}{}\n",
        plan.steps.len(),
        plan.unique_keys(),
        if remote > 0 {
            format!("{remote} to download from the remote cache, ")
        } else {
            String::new()
        },
        plan.steps.len() - hits - remote,
        if failed > 0 {
            format!(" ({failed} failed in the last warm)")
        } else {
            String::new()
        },
        if todo > 0.0 {
            format!(", ~{todo:.1}s of work by history")
        } else {
            String::new()
        },
    ));
    // One line per step (21,000 on the 500x40 bench): written into `out` in place,
    // the id padded by hand (its `Display` takes no width), no string per line.
    let w = plan
        .steps
        .iter()
        .map(|s| s.id.scene.len() + 1 + s.id.name.len())
        .max()
        .unwrap_or(10);
    let whys = crate::explain::words(plan);
    for (i, s) in plan.steps.iter().enumerate() {
        let id_chars = s.id.scene.chars().count() + 1 + s.id.name.chars().count();
        let _ = write!(
            out,
            "  {:<8} {}/{}{:pad$}  {}  {:<22} ",
            s.label(),
            s.id.scene,
            s.id.name,
            "",
            &s.key[..12],
            status_text(plan, i, whys[i]),
            pad = w.saturating_sub(id_chars),
        );
        // `{:>7}` of "12.3s": the number right-aligned in 6, then the unit.
        let _ = match s.estimate {
            Some(e) => write!(out, "{e:>6.1}s"),
            None => write!(out, "{:>7}", "-"),
        };
        let _ = match plan.worker_of(s) {
            Some(w) => writeln!(out, "  in worker {}", w.name),
            None => writeln!(out),
        };
        let why: Option<std::borrow::Cow<str>> = match &s.status {
            Status::Stale(why) => Some(why.to_string().into()),
            Status::Failed(why) => Some(why.to_string().into()),
            _ => None,
        };
        if let Some(first) = why.as_deref().and_then(|w| w.lines().next()) {
            out.push_str(&format!("           {}\n", ui.dim(first)));
        }
    }
}

/// The device part: the packing (which scenes share which process, on which slots),
/// the scenes that will not run, and the lock command.
fn device_text(plan: &Plan, out: &mut String) {
    let p = packing(plan);
    let device_scenes = plan.scenes.iter().filter(|s| s.device.is_some()).count();
    out.push_str(&format!(
        "\ndevice: {device_scenes} scene{} with device steps, packed on device_count = {} id{}, ~{:.1}s by history\n",
        if device_scenes == 1 { "" } else { "s" },
        plan.device_count,
        if plan.device_count == 1 { "" } else { "s" },
        p.makespan
    ));
    let beside = neighbours(&p.procs);
    for (k, pr) in p.procs.iter().enumerate() {
        out.push_str(&process_lines(plan, &p.procs, pr, &beside[k]));
    }
    for (i, ps) in plan.scenes.iter().enumerate() {
        if ps.device.is_some() && scene_failed(plan, i) {
            out.push_str(&format!(
                "  {:<24} not run: failed in the last warm\n",
                ps.name
            ));
        }
    }
    for (i, ps) in plan.scenes.iter().enumerate() {
        if let (Some(d), true) = (&ps.device, too_wide(plan, i)) {
            out.push_str(&format!(
                "  {:<24} not run: needs {} devices, --devices gives {}\n",
                ps.name, d.devices, plan.device_count
            ));
        }
    }
    match (&plan.no_lock, crate::device::outer::lock_command(plan)) {
        (Some(ids), _) => out.push_str(&format!(
            "lock command: none (--no-lock: device steps run directly on ids {})\n",
            ids.join(",")
        )),
        (None, Some(c)) => out.push_str(&format!("lock command (called once):\n  {c}\n")),
        (None, None) => {
            out.push_str("lock command: none (the manifest has no `lock:`; use --no-lock)\n")
        }
    }
    let dirs = crate::base::proc::view::entry_dirs(&plan.store.root);
    out.push_str(&format!(
        "entries as device steps see them: {}\n",
        crate::base::proc::view::mode(&dirs).describe()
    ));
}

/// `plan --format json` (docs/cli.md), as types: schemas/plan.schema.json is generated
/// from them. Fields in alphabetical order: the order the keys had when this was a
/// `json!` value, so the bytes are as before, without building a value tree.
#[derive(Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct PlanJson<'a> {
    cache_dir: String,
    device: DeviceJson<'a>,
    manifest: String,
    /// The profile in use (`--profile`), when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    profile: Option<&'a str>,
    /// Always `scenerun-plan`.
    schema: &'static str,
    /// The manifest's selections, when it has any.
    #[serde(skip_serializing_if = "Option::is_none")]
    selections: Option<Vec<SelectionJson<'a>>>,
    version: u32,
    warm: WarmJson<'a>,
}

#[derive(Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
struct SelectionJson<'a> {
    args: &'a [String],
    name: &'a str,
    order: Option<&'static str>,
    paths: &'a [String],
}

#[derive(Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
struct WarmJson<'a> {
    hits: usize,
    steps: Vec<StepJson<'a>>,
    to_build: usize,
    unique_keys: usize,
}

#[derive(Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
struct StepJson<'a> {
    command: String,
    depends_on: Vec<DepJson<'a>>,
    estimate_secs: Option<f64>,
    key: &'a str,
    kind: &'static str,
    memory: u64,
    name: &'a str,
    reason: Option<String>,
    scene: &'a str,
    /// `cache` or `job`.
    scope: &'static str,
    /// `hit`, `miss`, `stale`, `failed`, ...
    status: &'static str,
    threads: u32,
    /// The one-word reason of a miss (`explain`).
    why: Option<&'static str>,
    worker: Option<&'a str>,
}

#[derive(Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
struct DepJson<'a> {
    key: &'a str,
    kind: &'static str,
}

#[derive(Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
struct DeviceJson<'a> {
    device_count: u32,
    estimated_secs: f64,
    lock_command: Option<String>,
    no_lock_devices: Option<&'a [String]>,
    processes: Vec<ProcessJson<'a>>,
    scenes: Vec<SceneJson<'a>>,
}

#[derive(Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
struct SceneJson<'a> {
    devices: Option<u32>,
    estimate_secs: Option<f64>,
    exclusive: Option<bool>,
    failed_in_warm: bool,
    lane: Option<&'a str>,
    name: &'a str,
    order: Option<&'static str>,
    process: Option<usize>,
    /// The scene's selection, with `selections:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    selection: Option<&'a str>,
    slots: Option<Vec<usize>>,
    start_secs: Option<f64>,
    /// The scene's lane variant (null: no lane), with `selections:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    variant: Option<Option<String>>,
}

#[derive(Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
struct ProcessJson<'a> {
    devices: usize,
    estimated_secs: f64,
    /// A lane's process with a fork server: whether it forks from it, or why it runs as
    /// written (the reason `--plan` prints); null otherwise.
    fork: Option<ForkJson>,
    lane: Option<String>,
    lane_args: Option<&'a [String]>,
    lane_env: Option<&'a BTreeMap<String, String>>,
    order: &'static str,
    prestart: bool,
    scenes: Vec<&'a str>,
    slots: Vec<usize>,
    start_secs: f64,
    startup_estimate_secs: Option<f64>,
}

/// The plan's steps as `warm.steps` lists them.
fn step_rows(plan: &Plan) -> Vec<StepJson<'_>> {
    let whys = crate::explain::words(plan);
    plan.steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let reason = match &s.status {
                Status::Stale(w) => Some(w.to_string()),
                Status::Failed(w) => Some(w.to_string()),
                _ => None,
            };
            StepJson {
                kind: s.kind.name(),
                scene: &s.id.scene,
                name: &s.name,
                key: &s.key,
                status: s.status.word(),
                reason,
                why: whys[i],
                scope: if s.persist { "cache" } else { "job" },
                estimate_secs: s.estimate,
                threads: s.threads,
                memory: s.memory,
                worker: plan.worker_of(s).map(|w| w.name.as_str()),
                depends_on: s
                    .deps
                    .iter()
                    .map(|&d| DepJson {
                        kind: plan.steps[d].kind.name(),
                        key: &plan.steps[d].key,
                    })
                    .collect(),
                command: plan.command(s, &Fill::DryRun),
            }
        })
        .collect()
}

pub fn json(plan: &Plan) -> PlanJson<'_> {
    let p = packing(plan);
    let mut proc_of: Vec<Option<usize>> = vec![None; plan.scenes.len()];
    for (k, pr) in p.procs.iter().enumerate() {
        for &i in &pr.scenes {
            proc_of[i] = Some(k);
        }
    }
    let scenes = plan
        .scenes
        .iter()
        .enumerate()
        .map(|(i, ps)| {
            let proc = proc_of[i];
            let row = proc.map(|k| &p.procs[k]);
            SceneJson {
                name: &ps.name,
                devices: ps.device.as_ref().map(|d| d.devices),
                exclusive: ps.device.as_ref().map(|d| d.exclusive),
                lane: ps.device.as_ref().and_then(|d| d.run.lane()),
                order: ps.device.as_ref().map(|d| d.order.word()),
                estimate_secs: ps.device_estimate,
                failed_in_warm: scene_failed(plan, i),
                start_secs: row.map(|r| r.start),
                slots: row.map(|r| r.slots.clone()),
                process: proc,
                selection: scene_selection(plan, ps),
                variant: scene_variant(plan, ps),
            }
        })
        .collect();
    let processes = p
        .procs
        .iter()
        .map(|pr| ProcessJson {
            lane: pr.lane.clone(),
            fork: pr.lane.as_deref().and_then(|l| fork_of(plan, l)),
            lane_args: variant_of(plan, pr).map(|v| v.args.as_slice()),
            lane_env: variant_of(plan, pr).map(|v| &v.env),
            scenes: pr
                .scenes
                .iter()
                .map(|&i| plan.scenes[i].name.as_str())
                .collect(),
            devices: pr.devices,
            order: pr.order.word(),
            slots: pr.slots.clone(),
            start_secs: pr.start,
            estimated_secs: pr.end - pr.start,
            startup_estimate_secs: pr.startup,
            prestart: pr.prestart,
        })
        .collect();
    let steps = step_rows(plan);
    let hits = plan.steps.iter().filter(|s| s.status.is_hit()).count();
    PlanJson {
        schema: "scenerun-plan",
        version: PLAN_SCHEMA_VERSION,
        manifest: plan.manifest.file.display().to_string(),
        cache_dir: plan.store.root.display().to_string(),
        warm: WarmJson {
            steps,
            unique_keys: plan.unique_keys(),
            hits,
            to_build: plan.steps.len() - hits,
        },
        device: DeviceJson {
            device_count: plan.device_count,
            scenes,
            processes,
            estimated_secs: p.makespan,
            lock_command: crate::device::outer::lock_command(plan),
            no_lock_devices: plan.no_lock.as_deref(),
        },
        profile: plan.manifest.profile.as_deref(),
        selections: selections_json(plan),
    }
}

/// A scene's selection, only with `selections:` (a manifest without them prints what it
/// did).
fn scene_selection<'a>(plan: &'a Plan, ps: &crate::plan::PlanScene) -> Option<&'a str> {
    plan.manifest.scenes[ps.index].selection.as_deref()
}

/// A scene's lane variant beside its selection (null when it runs in no lane).
fn scene_variant(plan: &Plan, ps: &crate::plan::PlanScene) -> Option<Option<String>> {
    scene_selection(plan, ps)?;
    let variant = ps.device.as_ref().and_then(|d| d.run.variant());
    Some(variant.map(|v| v.describe()))
}

/// The selections (their words, the profile applied), only with `selections:`, so a
/// manifest without them prints what it did.
fn selections_json(plan: &Plan) -> Option<Vec<SelectionJson<'_>>> {
    let m = &plan.manifest;
    (!m.selections.is_empty()).then(|| {
        m.selections
            .iter()
            .map(|s| SelectionJson {
                args: &s.args,
                name: &s.name,
                order: s.order.map(|o| o.word()),
                paths: &s.paths,
            })
            .collect()
    })
}

/// Lane processes as they would start (`--dry-run`): ids, scenes file and results file
/// exist only at run time.
fn dry_run_lanes(plan: &Plan, out: &mut String) {
    use crate::base::template::{Ph, Val};
    for pr in packing(plan).procs {
        let Some(lane) = &pr.lane else { continue };
        let Some(cfg) = plan.manifest.lanes.get(lane) else {
            continue;
        };
        let variant = variant_of(plan, &pr).cloned().unwrap_or_default();
        let scene_args = pr
            .scenes
            .iter()
            .filter_map(|&i| plan.scenes[i].device.as_ref())
            .flat_map(|d| match &d.run {
                crate::manifest::DeviceRun::Lane { args, .. } => args.as_slice(),
                crate::manifest::DeviceRun::Command(_) => &[],
            });
        let platform = &plan.manifest.scenes[plan.scenes[pr.scenes[0]].index].platform;
        let command = cfg.command(&variant, scene_args, platform, |ph| match ph {
            Ph::Devices => Val::Raw("<devices>".into()),
            Ph::Scenes => Val::Raw("<scenes>".into()),
            Ph::Results => Val::Raw("<results>".into()),
            _ => Val::Raw("".into()),
        });
        let env: String = variant
            .env
            .iter()
            .map(|(k, v)| format!("{k}={} ", crate::base::template::quote(v)))
            .collect();
        out.push_str(&format!(
            "# lane {lane}: one process ({} id{}) for {}{}\n{env}{command}\n",
            pr.devices,
            if pr.devices == 1 { "" } else { "s" },
            pr.scenes
                .iter()
                .map(|&i| plan.scenes[i].name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            if pr.prestart {
                ", started before the lock (<devices> comes through its go file)"
            } else {
                ""
            }
        ));
    }
}

/// The workers the steps to run would start (one per slot that runs a step for it).
fn dry_run_workers(plan: &Plan, out: &mut String) {
    let mut seen = std::collections::BTreeSet::new();
    for s in plan.steps.iter().filter(|s| !s.status.is_hit()) {
        let Some(w) = plan.worker_of(s) else { continue };
        let command = plan.worker_command(w, s);
        if seen.insert((w.name.clone(), command.clone())) {
            out.push_str(&format!(
                "# worker {} (one per slot, started by its first step there):\n{command}\n",
                w.name
            ));
        }
    }
}

/// `--dry-run`: every command as it would run.
pub fn dry_run(plan: &Plan, phases: Phases) -> String {
    let mut out = String::new();
    if phases.warm {
        out.push_str("# warm (in the manifest's directory, `sh -c`)\n");
        dry_run_workers(plan, &mut out);
        for s in &plan.steps {
            let worker = plan
                .worker_of(s)
                .map(|w| format!("  # in worker {}", w.name))
                .unwrap_or_default();
            let note = if s.status.is_hit() {
                "  # hit: would not run"
            } else {
                &worker
            };
            out.push_str(&format!(
                "# {}{note}\n{}\n",
                s.id.labelled(),
                plan.command(s, &Fill::DryRun)
            ));
        }
    }
    if phases.device {
        out.push_str("# device\n");
        if let Some(ids) = &plan.no_lock {
            out.push_str(&format!(
                "# --no-lock: no lock command; device ids {}\n",
                ids.join(",")
            ));
        }
        if let Some(c) = crate::device::outer::lock_command(plan) {
            out.push_str(&format!(
                "# lock command, called once:\n{c}\n# inside it:\n"
            ));
        }
        for ps in &plan.scenes {
            let Some(d) = &ps.device else { continue };
            let crate::manifest::DeviceRun::Command(run) = &d.run else {
                continue;
            };
            let scene = &plan.manifest.scenes[ps.index];
            let kernels = crate::device::kernels_dir(
                &crate::device::runs::preview_dir(&plan.job_dir),
                &ps.name,
            );
            let fixture = ps.fixture.map(|f| plan.artifact(&plan.steps[f]));
            let golden = ps.golden.map(|g| plan.artifact(&plan.steps[g]));
            out.push_str(&format!(
                "# device {} ({} id{})\n{}\n",
                ps.name,
                d.devices,
                if d.devices == 1 { "" } else { "s" },
                crate::plan::render_device_template(
                    run,
                    &scene.name,
                    &scene.platform,
                    &kernels,
                    fixture.as_deref(),
                    golden.as_deref(),
                    None
                )
            ));
        }
        dry_run_lanes(plan, &mut out);
    }
    out
}
