//! The manifest's device-runtime keys (docs/lanes.md): the top-level `lanes:` section,
//! a scene's `device:` step (its command or lane, `args`, `retries`, `stop_signal`), and
//! `lock.device_fault`. Parsed here so the core manifest code only calls in; every
//! problem is a located error (exit 4) like any other manifest error.

use std::collections::BTreeMap;
use std::time::Duration;

use super::yaml::Node as Value;
use serde::{Deserialize, Serialize};

use super::raw;
use super::validate::{bad_name, valid_name, Ctx};
use super::validate::{MAX_DEVICES, MAX_RESTARTS, MAX_RETRIES};
use crate::base::proc::Stop;
use crate::base::template::{allowed, Ph, Template, Val};

/// One `lanes.<name>` entry: a command that runs a batch of scenes in one process.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LaneConfig {
    pub name: String,
    pub run: Template,
    /// Ids one lane process holds; every scene of the lane uses this many.
    pub devices: u32,
    /// Fresh processes allowed for the rest of a batch after a crash or a scene timeout.
    pub restarts: u32,
    /// One lane process, whole batch.
    pub timeout_secs: Option<f64>,
    /// Merged over the scene's environment.
    pub env: BTreeMap<String, String>,
    /// `stop_signal` / `stop_wait`: what a timeout or a cancel sends before SIGTERM.
    #[serde(default)]
    pub stop: Option<Stop>,
    /// `restart_on`: exit codes and output patterns that mean the runtime is poisoned
    /// and a fresh process on the same ids should run the rest.
    #[serde(default)]
    pub restart_on: Option<RestartOn>,
    /// Restarts asked for (a restart line, `restart_on`) per lane process slot.
    #[serde(default = "default_max_restarts")]
    pub max_restarts: u32,
    /// `prestart`: which of its processes start before the lock is called and wait for
    /// their ids (docs/lanes.md, lanes started before the lock).
    #[serde(default)]
    pub prestart: Prestart,
    /// `args`: words put before every scene's own in `{args}`.
    #[serde(default)]
    pub args: Vec<String>,
}

impl LaneConfig {
    /// The command of one of its processes: `{args}` is the lane's `args`, the
    /// variant's, then each scene's (`scene_args`), each word quoted;
    /// `{selection_paths}` and `{selection_args}` the variant's selection's words
    /// (none without one); `runtime` fills the rest (ids, files).
    pub fn command<'a, 'b>(
        &self,
        variant: &Variant,
        scene_args: impl Iterator<Item = &'a String>,
        platform: &str,
        runtime: impl Fn(Ph) -> Val<'b>,
    ) -> String {
        let args: Vec<String> = self
            .args
            .iter()
            .chain(&variant.args)
            .cloned()
            .chain(scene_args.cloned())
            .collect();
        let sel = variant.selection.as_ref();
        let paths = sel.map(|s| s.paths_for(platform)).unwrap_or_default();
        let sel_args = sel.map(|s| s.args_for(platform)).unwrap_or_default();
        self.run.render(|ph| match ph {
            Ph::Args => Val::Many(args.as_slice().into()),
            Ph::SelectionPaths => Val::Many(paths.as_slice().into()),
            Ph::SelectionArgs => Val::Many(sel_args.as_slice().into()),
            Ph::Platform => Val::One(platform.into()),
            other => runtime(other),
        })
    }
}

/// `lanes.<name>.prestart`: which of a lane's processes start before the lock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Prestart {
    /// `false`: every process starts inside the lock.
    #[default]
    Off,
    /// `true`: those the inner run starts at once (its first wave).
    FirstWave,
    /// `all`: the first process of every batch, later waves too.
    Every,
}

impl Prestart {
    pub fn on(self) -> bool {
        self != Prestart::Off
    }

    /// Whether a process of the lane starts before the lock, given whether the inner
    /// run starts it at once (is in its first wave): the one rule `--plan` and
    /// `scenerun device` both follow.
    pub fn before_lock(self, first_wave: bool) -> bool {
        match self {
            Prestart::Off => false,
            Prestart::FirstWave => first_wave,
            Prestart::Every => true,
        }
    }
}

pub const DEFAULT_RESTARTS: u32 = 2;
pub const DEFAULT_MAX_RESTARTS: u32 = 3;

fn default_max_restarts() -> u32 {
    DEFAULT_MAX_RESTARTS
}

/// `lanes.<name>.restart_on`: the same shape as `lock.device_fault`.
pub type RestartOn = DeviceFault;

/// `lock.device_fault`: how a failing device step tells that the card, not the scene,
/// is broken.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DeviceFault {
    pub exit_codes: Vec<i32>,
    /// Regular expressions over the step's output (validated here, compiled in the
    /// inner run).
    pub patterns: Vec<String>,
}

/// `device.order`: when a scene may start relative to the others of the run. `first`
/// scenes all end before any other starts; `last` scenes start only once every other
/// has ended (a device runtime's suite runs its SDMA classes after everything else).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Order {
    First,
    #[default]
    Any,
    Last,
}

/// An artifact a device step declares it writes (`device.writes`): it gets a private
/// copy of it, never the cache entry itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Writes {
    Kernels,
    Fixture,
    Golden,
}

impl Writes {
    pub const ALL: [Writes; 3] = [Writes::Kernels, Writes::Fixture, Writes::Golden];

    pub fn word(self) -> &'static str {
        match self {
            Writes::Kernels => "kernels",
            Writes::Fixture => "fixture",
            Writes::Golden => "golden",
        }
    }
}

impl Order {
    pub const ALL: [Order; 3] = [Order::First, Order::Any, Order::Last];

    pub fn word(self) -> &'static str {
        match self {
            Order::First => "first",
            Order::Any => "any",
            Order::Last => "last",
        }
    }

    /// Its place among the phases of a run, 0 first.
    pub fn phase(self) -> usize {
        self as usize
    }
}

/// How a scene's device step runs: its own command, or as part of a lane's batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceRun {
    Command(Template),
    Lane {
        lane: String,
        args: Vec<String>,
        /// The lane process this scene needs (`device.lane_args` / `lane_env`).
        #[serde(default)]
        variant: Variant,
    },
}

impl DeviceRun {
    pub fn lane(&self) -> Option<&str> {
        match self {
            DeviceRun::Lane { lane, .. } => Some(lane),
            DeviceRun::Command(_) => None,
        }
    }

    /// The lane process variant it needs (the plain one for its own command).
    pub fn variant(&self) -> Option<&Variant> {
        match self {
            DeviceRun::Lane { variant, .. } => Some(variant),
            DeviceRun::Command(_) => None,
        }
    }
}

/// What a scene asks of the lane process it runs in: words added to the lane command's
/// `{args}` and variables added to its environment (session options such as a runtime's
/// dump switches). Scenes of different variants never share a process.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Variant {
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// The selection of its scenes (docs/manifest.md, "Selections"): its words fill the
    /// lane command's `{selection_paths}` and `{selection_args}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<super::NamedSelection>,
}

impl Variant {
    pub fn is_plain(&self) -> bool {
        self.args.is_empty() && self.env.is_empty() && self.selection.is_none()
    }

    /// `selection dep_gen DFX=1 --enable-dep-gen`: how the preview names it ("" for the plain
    /// one).
    pub fn describe(&self) -> String {
        let sel = self
            .selection
            .iter()
            .map(|s| format!("selection {}", s.name));
        let env = self.env.iter().map(|(k, v)| format!("{k}={v}"));
        let words: Vec<String> = sel
            .chain(env)
            .chain(
                self.args
                    .iter()
                    .map(|a| crate::base::template::quote(a).into_owned()),
            )
            .collect();
        words.join(" ")
    }
}

/// A scene's `device:` step, validated.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeviceStep {
    pub run: DeviceRun,
    pub devices: u32,
    pub exclusive: bool,
    pub timeout: Option<Duration>,
    /// Reruns of a failed device step in a fresh process (docs/lanes.md).
    pub retries: u32,
    /// `stop_signal` / `stop_wait` of its own command (a lane scene's process is its
    /// lane's).
    #[serde(default)]
    pub stop: Option<Stop>,
    /// `device.order`: before, among or after every other scene of the run.
    #[serde(default)]
    pub order: Order,
    /// The scene's `nodeid`: scenes of one node and lane run in one process, in
    /// manifest order (the node's own runner would run its cases one after the other).
    #[serde(default)]
    pub node: Option<String>,
    /// `device.writes`: the artifacts it gets private, writable copies of.
    #[serde(default)]
    pub writes: Vec<Writes>,
}

/// Which steps a scene has as written: they decide which placeholders its device
/// command may use.
#[derive(Debug, Clone, Copy)]
pub(super) struct Steps {
    pub kernels: bool,
    pub fixture: bool,
    pub golden: bool,
}

impl Ctx {
    /// `lanes:`: every lane, keyed by name.
    pub(super) fn lanes(
        &mut self,
        v: Option<Value>,
        defaults: Option<Value>,
    ) -> BTreeMap<String, LaneConfig> {
        let mut out = BTreeMap::new();
        let Some(v) = v else {
            if defaults.is_some() {
                self.err(
                    "lane_defaults",
                    "`lane_defaults` is given, and there are no `lanes:`",
                );
            }
            return out;
        };
        let Some(map) = self.take::<BTreeMap<String, Value>>(v, "lanes") else {
            return out;
        };
        for name in map.keys() {
            // Known even when its parent is broken: its scenes are not told "unknown lane".
            self.lane_devices.insert(name.clone(), None);
        }
        let map = self.inherit_lanes(map, defaults);
        for (name, v) in map {
            let path = format!("lanes.{name}");
            if !valid_name(&name) {
                self.err(&path, bad_name("lane", &name));
            }
            // Known even when broken: its scenes are not told "unknown lane" on top.
            self.lane_devices.insert(name.clone(), None);
            let Some(l) = self.take::<raw::Lane>(v, &path) else {
                continue;
            };
            // The process reports into `{results}`, as a placeholder or through
            // $SCENERUN_RESULTS (the scenerun-pytest plugin reads the variable), so the
            // command need not name it; one that reports nothing fails its scenes with
            // "lane process ended without reporting it".
            let run = self.templ(&l.run, &format!("{path}.run"), allowed::LANE);
            let run = run.filter(|r| self.selections_known(r, &format!("{path}.run")));
            let devices = l.devices.unwrap_or(1);
            if devices == 0 || devices > MAX_DEVICES {
                self.err(
                    &format!("{path}.devices"),
                    format!("devices must be between 1 and {MAX_DEVICES}"),
                );
            }
            let timeout = self.duration(l.timeout, &format!("{path}.timeout"));
            self.at_most(l.restarts, &format!("{path}.restarts"), MAX_RESTARTS);
            self.at_most(
                l.max_restarts,
                &format!("{path}.max_restarts"),
                MAX_RESTARTS,
            );
            let env = self.env(l.env, &format!("{path}.env"));
            let stop = self.stop(l.stop_signal, l.stop_wait, &path);
            let restart_on = l
                .restart_on
                .and_then(|v| self.output_rule(v, &format!("{path}.restart_on")));
            let prestart = self.prestart(l.prestart, &format!("{path}.prestart"));
            self.lane_devices.insert(name.clone(), Some(devices.max(1)));
            if let Some(run) = run {
                out.insert(
                    name.clone(),
                    LaneConfig {
                        name,
                        run,
                        devices: devices.max(1),
                        restarts: l.restarts.unwrap_or(DEFAULT_RESTARTS),
                        timeout_secs: timeout.map(|t: Duration| t.as_secs_f64()),
                        env,
                        stop,
                        restart_on,
                        max_restarts: l.max_restarts.unwrap_or(DEFAULT_MAX_RESTARTS),
                        prestart,
                        args: l.args.unwrap_or_default(),
                    },
                );
            }
        }
        out
    }

    /// `<path>` (`lanes.<name>.prestart`): `true`, `false` or `all`.
    fn prestart(&mut self, v: Option<raw::Scalar>, path: &str) -> Prestart {
        match v {
            None | Some(raw::Scalar::Bool(false)) => Prestart::Off,
            Some(raw::Scalar::Bool(true)) => Prestart::FirstWave,
            Some(raw::Scalar::Str(w)) if w == "all" => Prestart::Every,
            Some(other) => {
                self.err(
                    path,
                    format!(
                        "`{}` is not a prestart: give true (the processes the lock run starts at once), all (every process) or false",
                        crate::base::error::clip(&other.text(), 40)
                    ),
                );
                Prestart::Off
            }
        }
    }

    /// `<path>.stop_signal` and `<path>.stop_wait` (default 0 s); the wait alone is an
    /// error (it waits after the signal).
    fn stop(
        &mut self,
        signal: Option<String>,
        wait: Option<raw::Scalar>,
        path: &str,
    ) -> Option<Stop> {
        let has_wait = wait.is_some();
        let wait = self.duration(wait, &format!("{path}.stop_wait"));
        let Some(name) = signal else {
            if has_wait {
                self.err(
                    &format!("{path}.stop_wait"),
                    "`stop_wait` is the time after `stop_signal`: give the signal too",
                );
            }
            return None;
        };
        let Some(signal) = Stop::signal_named(&name) else {
            self.err(
                &format!("{path}.stop_signal"),
                format!(
                    "`{}` is not a signal a stop can send (one of {})",
                    crate::base::error::clip(&name, 40),
                    Stop::signal_names()
                ),
            );
            return None;
        };
        Some(Stop {
            signal,
            wait: wait.unwrap_or(Duration::ZERO),
        })
    }

    /// A scene's `device:` step: its command or lane, the ids it holds, its timeout,
    /// retries and stop signal.
    pub(super) fn device_step(
        &mut self,
        v: Value,
        dp: &str,
        steps: Steps,
        selection: Option<&super::NamedSelection>,
    ) -> Option<DeviceStep> {
        let d = self.take::<raw::DeviceStep>(v, dp)?;
        let ok: Vec<Ph> = allowed::DEVICE
            .iter()
            .copied()
            .filter(|p| match p {
                Ph::Kernels => steps.kernels,
                Ph::Fixture => steps.fixture,
                Ph::Golden => steps.golden,
                _ => true,
            })
            .collect();
        let run = self.device_run(&d, dp, &ok);
        if d.devices == Some(0) {
            self.err(&format!("{dp}.devices"), "devices must be at least 1");
        }
        if d.devices.is_some_and(|n| n > MAX_DEVICES) {
            self.err(
                &format!("{dp}.devices"),
                format!("devices must be at most {MAX_DEVICES}"),
            );
        }
        let timeout = self.duration(d.timeout, &format!("{dp}.timeout"));
        self.at_most(d.retries, &format!("{dp}.retries"), MAX_RETRIES);
        if d.lane.is_some() && d.stop_signal.is_some() {
            self.err(
                &format!("{dp}.stop_signal"),
                "a lane scene runs in its lane's process: give `stop_signal` to the lane",
            );
        }
        let stop = self.stop(d.stop_signal, d.stop_wait, dp);
        // The scene's own order, else its selection's.
        let order = match (d.order.as_deref(), selection.and_then(|s| s.order)) {
            (None, Some(o)) => o,
            (word, _) => self.order(word, dp),
        };
        let writes = self.writes(d.writes.as_deref().unwrap_or_default(), dp, steps);
        let mut run = run?;
        if let DeviceRun::Lane { variant, .. } = &mut run {
            // Scenes of two selections never share a lane process.
            variant.selection = selection.cloned();
        }
        Some(DeviceStep {
            devices: self
                .lane_scene_devices(&run)
                .or(d.devices)
                .unwrap_or(1)
                .max(1),
            run,
            exclusive: d.exclusive.unwrap_or(false),
            timeout,
            retries: d.retries.unwrap_or(0),
            stop,
            order,
            node: None,
            writes,
        })
    }

    /// `<dp>.writes`: the artifacts the step writes into, each one the scene has.
    fn writes(&mut self, words: &[String], dp: &str, steps: Steps) -> Vec<Writes> {
        let mut out = Vec::new();
        for w in words {
            let Some(which) = Writes::ALL.into_iter().find(|x| x.word() == w) else {
                self.err(
                    &format!("{dp}.writes"),
                    format!(
                        "`{}` is not an artifact a device step is handed (one of kernels, fixture, golden)",
                        crate::base::error::clip(w, 40)
                    ),
                );
                continue;
            };
            let has = match which {
                Writes::Kernels => steps.kernels,
                Writes::Fixture => steps.fixture,
                Writes::Golden => steps.golden,
            };
            if !has {
                self.err(
                    &format!("{dp}.writes"),
                    format!("the scene has no {w} to write into"),
                );
            } else if !out.contains(&which) {
                out.push(which);
            }
        }
        out
    }

    /// `<dp>.order`: `first`, `any` (the default) or `last`.
    pub(super) fn order(&mut self, word: Option<&str>, dp: &str) -> Order {
        let Some(word) = word else {
            return Order::Any;
        };
        match Order::ALL.into_iter().find(|o| o.word() == word) {
            Some(o) => o,
            None => {
                self.err(
                    &format!("{dp}.order"),
                    format!(
                        "order is `first`, `any` or `last`, not `{}`",
                        crate::base::error::clip(word, 40)
                    ),
                );
                Order::Any
            }
        }
    }

    /// `lock.device_fault`.
    pub(super) fn device_fault(&mut self, v: Option<Value>) -> Option<DeviceFault> {
        self.output_rule(v?, "lock.device_fault")
    }

    /// `exit_codes` and `patterns` (regular expressions over a process's output) at
    /// `path`: `lock.device_fault` or `lanes.<name>.restart_on`.
    fn output_rule(&mut self, v: Value, path: &str) -> Option<DeviceFault> {
        let f = self.take::<raw::Fault>(v, path)?;
        for (i, p) in f.patterns.iter().enumerate() {
            if let Err(e) = regex::Regex::new(p) {
                self.err(
                    &format!("{path}.patterns[{i}]"),
                    format!("invalid regular expression: {e}"),
                );
            }
        }
        Some(DeviceFault {
            exit_codes: f.exit_codes,
            patterns: f.patterns,
        })
    }

    /// A scene's `device.run` or `device.lane` (exactly one), with the lane rules: the
    /// lane exists, `devices` (when written) equals the lane's, no `exclusive`.
    pub(super) fn device_run(
        &mut self,
        d: &raw::DeviceStep,
        dp: &str,
        ok: &[Ph],
    ) -> Option<DeviceRun> {
        match (&d.run, &d.lane) {
            (Some(_), Some(_)) => {
                self.err(
                    &format!("{dp}.lane"),
                    "a device step has either `run` or `lane`, not both",
                );
                None
            }
            (None, None) => {
                self.err(dp, "a device step needs `run` (its command) or `lane`");
                None
            }
            (Some(run), None) => {
                if d.args.is_some() {
                    self.err(
                        &format!("{dp}.args"),
                        "`args` belongs to a lane scene (`device.lane`); put the words in `run`",
                    );
                }
                for (key, given) in [
                    ("lane_args", d.lane_args.is_some()),
                    ("lane_env", d.lane_env.is_some()),
                ] {
                    if given {
                        self.err(
                            &format!("{dp}.{key}"),
                            format!("`{key}` belongs to a lane scene (`device.lane`): it shapes the lane's process"),
                        );
                    }
                }
                self.templ(run, &format!("{dp}.run"), ok)
                    .map(DeviceRun::Command)
            }
            (None, Some(lane)) => {
                match self.lane_devices.get(lane).copied() {
                    None => {
                        let known: Vec<&str> =
                            self.lane_devices.keys().map(String::as_str).collect();
                        self.err(
                            &format!("{dp}.lane"),
                            format!(
                                "unknown lane `{lane}` (defined: {})",
                                if known.is_empty() {
                                    "none".into()
                                } else {
                                    known.join(", ")
                                }
                            ),
                        );
                    }
                    Some(Some(n)) => {
                        if let Some(mine) = d.devices.filter(|&m| m != n) {
                            self.err(
                                &format!("{dp}.devices"),
                                format!(
                                    "devices is {mine} but lane `{lane}` holds {n} per process; \
                                     leave it out or make it {n}"
                                ),
                            );
                        }
                    }
                    Some(None) => {}
                }
                if d.exclusive == Some(true) {
                    self.err(
                        &format!("{dp}.exclusive"),
                        "a lane scene cannot be exclusive (its lane process shares the ids with \
                         others); give it its own `run`",
                    );
                }
                let env = d.lane_env.clone().unwrap_or_default();
                Some(DeviceRun::Lane {
                    lane: lane.clone(),
                    args: d.args.clone().unwrap_or_default(),
                    variant: Variant {
                        args: d.lane_args.clone().unwrap_or_default(),
                        env: self.env(env, &format!("{dp}.lane_env")),
                        selection: None,
                    },
                })
            }
        }
    }

    /// The ids a lane scene holds: its lane's.
    pub(super) fn lane_scene_devices(&self, run: &DeviceRun) -> Option<u32> {
        run.lane()
            .and_then(|l| self.lane_devices.get(l).copied().flatten())
    }
}
