//! `workers:` (docs/manifest.md, docs/warm.md "Workers"): persistent processes that
//! serve fixture, golden and prepare steps one request at a time. What the manifest
//! says about them is checked here; a step's `worker:` must name one of them (exit 4 at
//! its line). Nothing here runs: `warm::workers` starts them. A worker never changes a
//! step's key: `worker:` is in no key, and the step keeps its `run`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::raw;
use super::validate::{bad_name, valid_name, Ctx};
use super::yaml::Node as Value;
use crate::base::template::{Ph, Template};

/// How long a worker may take from its start to its first "ready" line when the
/// manifest gives no `start_timeout`.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(600);

/// One entry of `workers:`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerConfig {
    pub name: String,
    /// The command that starts it: `{platform}`, and with `selections:` the words of
    /// the selection of the step it serves (one worker per selection that needs one).
    pub run: Template,
    /// Resident memory a worker or the step it runs may reach: past it, both are
    /// killed and the worker replaced.
    pub memory_cap: Option<u64>,
    /// false: the steps that name it run one process each (as under `--no-workers`).
    pub enabled: bool,
    /// From its start to its "ready" line; past it, its steps run as processes.
    pub start_timeout: Duration,
}

impl Ctx {
    /// `workers:` by name. Every name is remembered, a broken worker's too, so a step
    /// naming it is not told "unknown worker" on top of the worker's own error.
    pub(super) fn workers(&mut self, v: Option<Value>) -> BTreeMap<String, WorkerConfig> {
        let mut out = BTreeMap::new();
        let Some(map) = v.and_then(|v| self.take::<BTreeMap<String, Value>>(v, "workers")) else {
            return out;
        };
        for (name, v) in map {
            let path = format!("workers.{name}");
            if !valid_name(&name) {
                self.err(&path, bad_name("worker", &name));
            }
            self.worker_names.push(name.clone());
            let Some(w) = self.take::<raw::Worker>(v, &path) else {
                continue;
            };
            let at = format!("{path}.run");
            let allowed = [Ph::Platform, Ph::SelectionPaths, Ph::SelectionArgs];
            let run = self.templ(&w.run, &at, &allowed);
            let run = run.filter(|r| self.selections_known(r, &at));
            let memory_cap = self.size(w.memory_cap, &format!("{path}.memory_cap"));
            if memory_cap == Some(0) {
                self.err(&format!("{path}.memory_cap"), "memory_cap must be above 0");
            }
            let start_timeout = self.duration(w.start_timeout, &format!("{path}.start_timeout"));
            if let Some(run) = run {
                let config = WorkerConfig {
                    name: name.clone(),
                    run,
                    memory_cap,
                    enabled: w.enabled.unwrap_or(true),
                    start_timeout: start_timeout.unwrap_or(DEFAULT_START_TIMEOUT),
                };
                out.insert(name, config);
            }
        }
        out
    }

    /// A step's `worker:` at `path`: one of `workers:`, else an error there.
    pub(super) fn worker_ref(&mut self, name: Option<String>, path: &str) -> Option<String> {
        let name = name?;
        if !self.worker_names.contains(&name) {
            let known = if self.worker_names.is_empty() {
                "none".to_string()
            } else {
                self.worker_names.join(", ")
            };
            self.err(
                &format!("{path}.worker"),
                format!("unknown worker `{name}` (defined under `workers:`: {known})"),
            );
        }
        Some(name)
    }
}
