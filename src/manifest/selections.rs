//! `selections:` and `profiles:` (docs/manifest.md, "Selections"): the named parts of
//! one suite (each its paths and options), and the documented switches that replace
//! some of their words (a daily mode). Invariant: a profile is applied before anything
//! reads the words, so `{suite_args}`, `{selection_paths}` and `{selection_args}` expand
//! to the profile's words everywhere, and without `selections:` nothing changes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::lanes::Order;
use super::raw;
use super::suite_args;
use super::validate::{bad_name, valid_name, Ctx};
use super::yaml::{Kind, Node as Value};
use crate::base::template::{Ph, Template};

/// `{selection_paths}` as written in a command.
pub const PATHS: &str = "{selection_paths}";
/// `{selection_args}` as written in a command.
pub const ARGS: &str = "{selection_args}";

/// One entry of `selections:` (a profile's words applied): its name, the words that
/// fill `{selection_paths}` and `{selection_args}`, and the order its scenes get.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct NamedSelection {
    pub name: String,
    pub paths: Vec<String>,
    pub args: Vec<String>,
    /// `order`: every scene of the selection gets it unless the scene sets its own.
    #[serde(default)]
    pub order: Option<Order>,
}

impl NamedSelection {
    /// `paths` with `{platform}` filled: the words of `{selection_paths}`.
    pub fn paths_for(&self, platform: &str) -> Vec<String> {
        fill(&self.paths, platform)
    }

    /// `args` with `{platform}` filled: the words of `{selection_args}`.
    pub fn args_for(&self, platform: &str) -> Vec<String> {
        fill(&self.args, platform)
    }
}

fn fill(words: &[String], platform: &str) -> Vec<String> {
    words
        .iter()
        .map(|w| w.replace("{platform}", platform))
        .collect()
}

/// Whether `text` names `{selection_paths}` or `{selection_args}` (not `{{...}}`).
pub fn names_selection(text: &str) -> bool {
    suite_args::replace(text, PATHS, "").is_some() || suite_args::replace(text, ARGS, "").is_some()
}

impl Ctx {
    /// `selections:` in declaration order and `profiles:`, the profile in use
    /// (`self.profile`) applied; into `self.selections`. Returns the profile's
    /// `suite_args` when it gives them.
    pub(super) fn selections(
        &mut self,
        selections: Option<Value>,
        profiles: Option<Value>,
    ) -> Option<Vec<String>> {
        if let Some(v) = selections {
            self.declared_selections(v);
        }
        let mut profiles = self.profiles(profiles);
        let name = self.profile.clone()?;
        let Some(p) = profiles.remove(&name) else {
            let known: Vec<&String> = profiles.keys().collect();
            let known = if known.is_empty() {
                "none".to_string()
            } else {
                known
                    .iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            self.err(
                "profiles",
                format!(
                    "unknown profile `{}` (--profile or $SCENERUN_PROFILE; defined: {known})",
                    crate::base::error::clip(&name, 40)
                ),
            );
            return None;
        };
        for (sel, words) in p.selections {
            let at = format!("profiles.{name}.selections.{sel}");
            match self.selections_declared.iter_mut().find(|s| s.name == sel) {
                None => self.err(&at, self.unknown_selection(&sel)),
                Some(s) => {
                    if let Some(paths) = words.paths {
                        s.paths = paths;
                    }
                    if let Some(args) = words.args {
                        s.args = args;
                    }
                }
            }
        }
        p.suite_args
    }

    /// `selections:`, each name valid and its words checked, in the order written.
    fn declared_selections(&mut self, v: Value) {
        let entries = match v.kind {
            Kind::Map(entries) => entries,
            _ => {
                self.err_at(
                    "selections",
                    v.pos(),
                    "`selections` is a mapping of names to `paths`, `args` and `order`",
                );
                return;
            }
        };
        for (k, v) in entries {
            let name = k.as_str().unwrap_or_default().to_string();
            let path = format!("selections.{name}");
            if !valid_name(&name) {
                self.err_at(&path, k.pos(), bad_name("selection", &name));
                continue;
            }
            if self.selections_declared.iter().any(|s| s.name == name) {
                self.err_at(&path, k.pos(), format!("`{name}` is given twice"));
                continue;
            }
            let Some(s) = self.take::<raw::Selection>(v, &path) else {
                continue;
            };
            let order = s.order.as_deref().map(|w| self.order(Some(w), &path));
            self.selections_declared.push(NamedSelection {
                name,
                paths: s.paths.unwrap_or_default(),
                args: s.args.unwrap_or_default(),
                order,
            });
        }
    }

    /// `profiles:` by name, each taken apart.
    fn profiles(&mut self, v: Option<Value>) -> BTreeMap<String, Profile> {
        let mut out = BTreeMap::new();
        let Some(map) = v.and_then(|v| self.take::<BTreeMap<String, Value>>(v, "profiles")) else {
            return out;
        };
        for (name, v) in map {
            let path = format!("profiles.{name}");
            if !valid_name(&name) {
                self.err(&path, bad_name("profile", &name));
            }
            let Some(p) = self.take::<raw::Profile>(v, &path) else {
                continue;
            };
            let mut selections = Vec::new();
            for (sel, v) in p.selections.unwrap_or_default() {
                let at = format!("{path}.selections.{sel}");
                if let Some(w) = self.take::<raw::ProfileSelection>(v, &at) {
                    selections.push((sel, w));
                }
            }
            out.insert(
                name,
                Profile {
                    suite_args: p.suite_args,
                    selections,
                },
            );
        }
        out
    }

    /// Check every selection's words (only `{platform}` is filled in them); after the
    /// profile is applied, so its words are checked too.
    pub(super) fn check_selection_words(&mut self) {
        let mut bad = Vec::new();
        for s in &self.selections_declared {
            for (key, words) in [("paths", &s.paths), ("args", &s.args)] {
                if let Err(e) = suite_args::expansion(words) {
                    bad.push((format!("selections.{}.{key}", s.name), e.to_string()));
                }
            }
        }
        for (at, e) in bad {
            self.err(&at, e.replace("suite_args", "a selection's words"));
        }
    }

    /// Whether template `t` (at `path`) may use what it uses: the selections'
    /// placeholders only with `selections:` (else an error there).
    pub(super) fn selections_known(&mut self, t: &Template, path: &str) -> bool {
        let uses = t.uses(Ph::SelectionPaths) || t.uses(Ph::SelectionArgs);
        if uses && self.selections_declared.is_empty() {
            self.err(
                path,
                "`{selection_paths}` / `{selection_args}` are used, and the manifest has no `selections:`",
            );
            return false;
        }
        true
    }

    /// "unknown selection `x` (defined: a, b)".
    pub(super) fn unknown_selection(&self, name: &str) -> String {
        let known: Vec<&str> = self
            .selections_declared
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        format!(
            "unknown selection `{}` (defined under `selections:`: {})",
            crate::base::error::clip(name, 40),
            if known.is_empty() {
                "none".into()
            } else {
                known.join(", ")
            }
        )
    }

    /// `text` once per selection, its `{selection_paths}` and `{selection_args}` filled
    /// with that selection's words (quoted, `{platform}` kept for the template); None
    /// when it names neither. Naming them without `selections:` is an error at `path`.
    pub(super) fn per_selection(
        &mut self,
        text: &str,
        path: &str,
    ) -> Option<Vec<(String, String)>> {
        if !names_selection(text) {
            return None;
        }
        if self.selections_declared.is_empty() {
            self.err(
                path,
                "`{selection_paths}` / `{selection_args}` are used, and the manifest has no `selections:`",
            );
            return Some(Vec::new());
        }
        let mut out = Vec::new();
        for s in &self.selections_declared {
            let (Ok(paths), Ok(args)) = (
                suite_args::expansion(&s.paths),
                suite_args::expansion(&s.args),
            ) else {
                continue;
            };
            let t = suite_args::replace(text, PATHS, &paths).unwrap_or_else(|| text.to_string());
            let t = suite_args::replace(&t, ARGS, &args).unwrap_or(t);
            out.push((s.name.clone(), t));
        }
        Some(out)
    }
}

/// A profile as written, its selections' words checked.
struct Profile {
    suite_args: Option<Vec<String>>,
    selections: Vec<(String, raw::ProfileSelection)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unescaped_placeholders_name_a_selection() {
        assert!(names_selection("pytest {selection_paths}"));
        assert!(names_selection("pytest {selection_args} x"));
        assert!(!names_selection("pytest {{selection_args}}"));
        assert!(!names_selection("pytest {suite_args}"));
    }

    #[test]
    fn words_get_the_platform() {
        let s = NamedSelection {
            name: "m".into(),
            paths: vec!["tests/{platform}".into()],
            args: vec!["--p={platform}".into()],
            order: None,
        };
        assert_eq!(s.paths_for("a5"), ["tests/a5"]);
        assert_eq!(s.args_for("a5"), ["--p=a5"]);
    }
}
