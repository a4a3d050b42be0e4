//! Why a step is not a hit: `scenerun explain`, and the one-word reason `plan` shows.
//! The reason is a pure comparison of the step's key inputs now with the inputs recorded
//! when it was last built (`key::inputs::Records`); every reason is rendered here only.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;
use serde_json::Value;

use crate::cache::history::HistoryId;
use crate::cache::Stale;
use crate::key::inputs::{KeyInputs, Records};
use crate::plan::{Plan, StaleStep, Status, Step};

/// Which part of a key input a change is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// A kernel's source, or a fixture's or golden's declared input.
    File,
    /// A file of a kernel's include closure.
    Header,
    Env,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delta {
    Changed,
    Added,
    Removed,
}

/// One difference between the inputs now and when the step was last built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A file or env value changed, entered or left the step's inputs.
    Input {
        part: Part,
        delta: Delta,
        name: String,
    },
    /// The command (flags, include dirs, the script line) differs: words removed, added.
    Command {
        removed: Vec<String>,
        added: Vec<String>,
    },
    Toolchain {
        name: String,
    },
    /// A fixture's or golden's `identity:` command printed something else.
    StepIdentity {
        command: String,
    },
    Platform {
        before: String,
        after: String,
    },
    /// A golden's fixture changed (its key is part of the golden's).
    Fixture,
}

/// Why a step is not a hit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// No record of a build of this step, and no history of one.
    NeverBuilt,
    /// Built before (history says so) but its inputs were not recorded.
    NotRecorded,
    /// What differs from the last build, in the order the key reads its inputs.
    Changed(Vec<Change>),
    /// Same inputs as the last build, but the entry is no longer in the cache.
    Evicted,
    /// In the cache but built again: damaged, or a file its depfile recorded changed
    /// (its own, or its fixture's).
    Stale(StaleStep),
    /// The last warm failed this step with this very key.
    FailedInWarm(crate::base::failure::StepFailure),
}

impl Why {
    /// The one word `plan` shows beside a miss.
    pub fn word(&self) -> &'static str {
        match self {
            Why::NeverBuilt => "new",
            Why::NotRecorded => "unrecorded",
            Why::Evicted => "evicted",
            Why::Stale(StaleStep::Entry(Stale::Damaged(_))) => "damaged",
            Why::Stale(_) => "depfile",
            Why::FailedInWarm(_) => "failed",
            Why::Changed(c) => match c.first() {
                Some(Change::Input { part, .. }) => match part {
                    Part::File => "input",
                    Part::Header => "header",
                    Part::Env => "env",
                },
                Some(Change::Command { .. }) => "command",
                Some(Change::Toolchain { .. }) => "toolchain",
                Some(Change::StepIdentity { .. }) => "identity",
                Some(Change::Platform { .. }) => "platform",
                Some(Change::Fixture) => "fixture",
                None => "changed",
            },
        }
    }
}

fn quote_words(w: &[String]) -> String {
    w.iter()
        .map(|w| format!("`{w}`"))
        .collect::<Vec<_>>()
        .join(" ")
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::Input { part, delta, name } => {
                let what = match part {
                    Part::File => "file",
                    Part::Header => "header",
                    Part::Env => "env",
                };
                let how = match (part, delta) {
                    (Part::Env, Delta::Changed) => "changed value",
                    (Part::Env, Delta::Added) => "was set",
                    (Part::Env, Delta::Removed) => "was unset",
                    (Part::Header, Delta::Added) => "entered the include closure",
                    (Part::Header, Delta::Removed) => "left the include closure",
                    (_, Delta::Changed) => "changed content",
                    (_, Delta::Added) => "was added to the inputs",
                    (_, Delta::Removed) => "was removed from the inputs",
                };
                write!(f, "{what} {name} {how}")
            }
            Change::Command { removed, added } => {
                write!(f, "command changed")?;
                if !removed.is_empty() {
                    write!(f, ": removed {}", quote_words(removed))?;
                }
                if !added.is_empty() {
                    let sep = if removed.is_empty() { ":" } else { "," };
                    write!(f, "{sep} added {}", quote_words(added))?;
                }
                Ok(())
            }
            Change::Toolchain { name } => {
                write!(
                    f,
                    "toolchain {name} identity changed (its identity output differs)"
                )
            }
            Change::StepIdentity { command } => {
                write!(f, "identity command `{command}` printed something else")
            }
            Change::Platform { before, after } => write!(f, "platform {before} -> {after}"),
            Change::Fixture => write!(f, "the fixture it reads changed"),
        }
    }
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Why::NeverBuilt => write!(f, "never built"),
            Why::NotRecorded => write!(
                f,
                "built before, but its key inputs were not recorded (an older scenerun)"
            ),
            Why::Evicted => write!(
                f,
                "inputs unchanged since the last build; the entry is no longer in the cache (pruned or cleaned)"
            ),
            Why::Stale(why) => write!(f, "{why}"),
            Why::FailedInWarm(why) => {
                write!(f, "failed in the last warm with this key: ")?;
                write!(f, "{}", why.to_string().lines().next().unwrap_or(""))
            }
            Why::Changed(c) => {
                let parts: Vec<String> = c.iter().map(|c| c.to_string()).collect();
                write!(f, "{}", parts.join("; "))
            }
        }
    }
}

/// Keys present in one map and not the other, and keys whose values differ.
fn diff_maps(
    part: Part,
    before: &BTreeMap<String, String>,
    now: &BTreeMap<String, String>,
    out: &mut Vec<Change>,
) {
    for (name, v) in now {
        let delta = match before.get(name) {
            None => Delta::Added,
            Some(b) if b != v => Delta::Changed,
            _ => continue,
        };
        out.push(Change::Input {
            part,
            delta,
            name: name.clone(),
        });
    }
    for name in before.keys().filter(|n| !now.contains_key(*n)) {
        out.push(Change::Input {
            part,
            delta: Delta::Removed,
            name: name.clone(),
        });
    }
}

/// Words of `a` not matched in `b` (as multisets, order kept).
fn minus(a: &[String], b: &[String]) -> Vec<String> {
    let mut left: Vec<&String> = b.iter().collect();
    a.iter()
        .filter(|w| match left.iter().position(|l| l == w) {
            Some(i) => {
                left.remove(i);
                false
            }
            None => true,
        })
        .cloned()
        .collect()
}

/// What differs between the inputs recorded at the last build and the inputs now.
pub fn compare(before: &KeyInputs, now: &KeyInputs, records: &Records) -> Vec<Change> {
    let mut out = Vec::new();
    if let (Some((name, b)), Some((_, n))) = (&before.identity, &now.identity) {
        if b != n {
            out.push(Change::Toolchain { name: name.clone() });
        }
    }
    if let (Some((command, b)), Some((_, n))) = (&before.step_identity, &now.step_identity) {
        if b != n {
            out.push(Change::StepIdentity {
                command: command.clone(),
            });
        }
    }
    if before.command != now.command {
        let words = |c: &str| {
            shell_words::split(c)
                .unwrap_or_else(|_| c.split_whitespace().map(str::to_string).collect())
        };
        let (b, n) = (words(&before.command), words(&now.command));
        out.push(Change::Command {
            removed: minus(&b, &n),
            added: minus(&n, &b),
        });
    }
    if before.platform != now.platform {
        out.push(Change::Platform {
            before: before.platform.clone(),
            after: now.platform.clone(),
        });
    }
    diff_maps(Part::Env, &before.env, &now.env, &mut out);
    diff_maps(
        Part::File,
        &before.files_short(),
        &now.files_short(),
        &mut out,
    );
    let (b, n) = (
        before.closure_files(records),
        now.closure_files(&Records::default()),
    );
    if before.closure_digest.is_some() || now.closure.is_some() {
        diff_maps(Part::Header, &b, &n, &mut out);
    }
    if before.fixture_key != now.fixture_key {
        out.push(Change::Fixture);
    }
    out
}

/// Why step `i` of `plan` is not a hit (None when it is one).
pub fn why(plan: &Plan, i: usize, records: &Records) -> Option<Why> {
    let step = &plan.steps[i];
    match &step.status {
        Status::Hit => return None,
        Status::Failed(w) => return Some(Why::FailedInWarm(w.clone())),
        Status::Stale(w) => return Some(Why::Stale(w.clone())),
        // Served by the remote cache or not: the local miss has a cause.
        Status::Miss | Status::RemoteHit => {}
    }
    let id = step.id.record_key();
    Some(match records.steps.get(&id) {
        None if plan.history.estimate(HistoryId::Step(&step.id)).is_some() => Why::NotRecorded,
        None => Why::NeverBuilt,
        Some(before) => {
            let now = plan.key_inputs(i).unwrap_or_default();
            let changes = compare(before, &now, records);
            if changes.is_empty() {
                Why::Evicted
            } else {
                Why::Changed(changes)
            }
        }
    })
}

/// Every step of the plan that is not a hit, with why.
pub fn explain(plan: &Plan) -> Vec<(&Step, Why)> {
    let records = Records::load(&plan.store.root);
    plan.steps
        .iter()
        .enumerate()
        .filter_map(|(i, s)| why(plan, i, &records).map(|w| (s, w)))
        .collect()
}

pub fn text(plan: &Plan) -> String {
    let whys = explain(plan);
    let mut out = String::new();
    for (s, w) in &whys {
        out.push_str(&format!("{} {}: {w}\n", s.id.labelled(), s.status.word()));
    }
    out.push_str(&format!(
        "{} of {} steps are not hits\n",
        whys.len(),
        plan.steps.len()
    ));
    out
}

/// `explain --format json` (docs/explain.md), as types: schemas/explain.schema.json is
/// generated from them. Written through a `Value`, so the keys come out sorted as before.
#[derive(Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct ExplainJson<'a> {
    version: u32,
    steps_total: usize,
    steps: Vec<ExplainStep<'a>>,
}

#[derive(Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
struct ExplainStep<'a> {
    /// `kind/scene/name`.
    step: String,
    kind: &'static str,
    scene: &'a str,
    name: &'a str,
    key: &'a str,
    status: &'static str,
    /// One word (`command`, `never_built`, ...).
    reason: &'static str,
    message: String,
    changes: Vec<ChangeJson<'a>>,
}

/// One change, and its sentence.
#[derive(Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
struct ChangeJson<'a> {
    #[serde(flatten)]
    what: What<'a>,
    message: String,
}

#[derive(Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(tag = "what", rename_all = "snake_case")]
enum What<'a> {
    File {
        change: &'static str,
        name: &'a str,
    },
    Header {
        change: &'static str,
        name: &'a str,
    },
    Env {
        change: &'static str,
        name: &'a str,
    },
    Command {
        removed: &'a [String],
        added: &'a [String],
    },
    Toolchain {
        name: &'a str,
    },
    Identity {
        command: &'a str,
    },
    Platform {
        before: &'a str,
        after: &'a str,
    },
    Fixture,
}

fn change_json(c: &Change) -> ChangeJson<'_> {
    let what = match c {
        Change::Input { part, delta, name } => {
            let change = match delta {
                Delta::Changed => "changed",
                Delta::Added => "added",
                Delta::Removed => "removed",
            };
            match part {
                Part::File => What::File { change, name },
                Part::Header => What::Header { change, name },
                Part::Env => What::Env { change, name },
            }
        }
        Change::Command { removed, added } => What::Command { removed, added },
        Change::Toolchain { name } => What::Toolchain { name },
        Change::StepIdentity { command } => What::Identity { command },
        Change::Platform { before, after } => What::Platform { before, after },
        Change::Fixture => What::Fixture,
    };
    ChangeJson {
        what,
        message: c.to_string(),
    }
}

pub fn json(plan: &Plan) -> Value {
    let explained = explain(plan);
    let steps = explained
        .iter()
        .map(|(s, w)| ExplainStep {
            step: s.id.to_string(),
            kind: s.kind.name(),
            scene: &s.id.scene,
            name: &s.id.name,
            key: &s.key,
            status: s.status.word(),
            reason: w.word(),
            message: w.to_string(),
            changes: match w {
                Why::Changed(c) => c.iter().map(change_json).collect(),
                _ => Vec::new(),
            },
        })
        .collect();
    let doc = ExplainJson {
        version: 1,
        steps_total: plan.steps.len(),
        steps,
    };
    serde_json::to_value(doc).expect("the explanation serializes")
}

/// The one-word reasons of a plan's misses, by step index (for `plan`).
pub fn words(plan: &Plan) -> Vec<Option<&'static str>> {
    if plan.steps.iter().all(|s| s.status.is_hit()) {
        return vec![None; plan.steps.len()];
    }
    let records = Records::load(&plan.store.root);
    plan.steps
        .iter()
        .enumerate()
        .map(|(i, _)| why(plan, i, &records).map(|w| w.word()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(cmd: &str, files: &[(&str, &str)]) -> KeyInputs {
        let mut i = KeyInputs::new(cmd.into(), "a2a3", Default::default());
        for (p, h) in files {
            i.file(p, h);
        }
        i
    }

    #[test]
    fn names_a_changed_input_and_a_flag() {
        let r = Records::default();
        let before = inputs("cc -c {source} -O2", &[("k.c", "aaaa")]);
        let now = inputs("cc -c {source} -O3", &[("k.c", "bbbb")]);
        let c = compare(&before, &now, &r);
        assert_eq!(
            c,
            vec![
                Change::Command {
                    removed: vec!["-O2".into()],
                    added: vec!["-O3".into()]
                },
                Change::Input {
                    part: Part::File,
                    delta: Delta::Changed,
                    name: "k.c".into()
                }
            ]
        );
        assert_eq!(Why::Changed(c.clone()).word(), "command");
        assert_eq!(
            c[0].to_string(),
            "command changed: removed `-O2`, added `-O3`"
        );
    }

    #[test]
    fn env_values_are_compared_by_hash_and_named() {
        let mut env = BTreeMap::new();
        env.insert("A".to_string(), "1".to_string());
        let before = KeyInputs::new("x".into(), "p", KeyInputs::env_hashes(&env));
        env.insert("A".to_string(), "2".to_string());
        env.insert("B".to_string(), "x".to_string());
        let now = KeyInputs::new("x".into(), "p", KeyInputs::env_hashes(&env));
        let c = compare(&before, &now, &Records::default());
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].to_string(), "env A changed value");
        assert_eq!(c[1].to_string(), "env B was set");
        assert!(!serde_json::to_string(&now).unwrap().contains("\"2\""));
    }

    #[test]
    fn same_inputs_is_no_change() {
        let a = inputs("x", &[("f", "1")]);
        assert!(compare(&a, &a.clone(), &Records::default()).is_empty());
    }
}
