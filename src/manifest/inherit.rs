//! `lane_defaults:` and a lane's `inherits:` (docs/lanes.md, "Defaults and
//! inheritance"), resolved on the mappings as written, before any lane is validated.
//! Invariant: a lane's keys come from `lane_defaults`, then the lane it inherits
//! (recursively), then its own; each key replaces the one before whole, except `env`,
//! which merges per variable (the more specific wins). A cycle or an unknown parent is
//! an error naming the chain; nothing is resolved twice.

use std::collections::BTreeMap;

use super::raw;
use super::validate::Ctx;
use super::yaml::{Kind, Node as Value};

impl Ctx {
    /// The lanes of `lanes:` (by name, as written) with `lane_defaults` and `inherits`
    /// applied, `inherits` taken out.
    pub(super) fn inherit_lanes(
        &mut self,
        lanes: BTreeMap<String, Value>,
        defaults: Option<Value>,
    ) -> BTreeMap<String, Value> {
        let defaults = defaults.and_then(|mut d| {
            if !matches!(d.kind, Kind::Map(_)) {
                self.err_at(
                    "lane_defaults",
                    d.pos(),
                    "`lane_defaults` is a mapping of lane keys",
                );
                return None;
            }
            let known = raw::fields_of::<raw::Lane>().unwrap_or_default();
            self.check_keys(&mut d, "lane_defaults", known);
            if d.remove("inherits").is_some() {
                self.err(
                    "lane_defaults.inherits",
                    "`lane_defaults` apply under every lane; `inherits` belongs to a lane",
                );
            }
            Some(d)
        });
        let mut resolver = Resolver {
            written: &lanes,
            done: BTreeMap::new(),
            errors: Vec::new(),
        };
        for name in lanes.keys() {
            resolver.resolve(name, &mut Vec::new());
        }
        let Resolver { done, errors, .. } = resolver;
        for (at, message) in errors {
            self.err(&at, message);
        }
        done.into_iter()
            .filter_map(|(name, own)| {
                let own = own?;
                Some(match &defaults {
                    Some(d) => (name, merged(d.clone(), own)),
                    None => (name, own),
                })
            })
            .collect()
    }
}

/// Lanes resolved one by one, each once.
struct Resolver<'a> {
    written: &'a BTreeMap<String, Value>,
    /// Resolved lanes (without the defaults); None: broken (a cycle, an unknown parent).
    done: BTreeMap<String, Option<Value>>,
    errors: Vec<(String, String)>,
}

impl Resolver<'_> {
    /// Lane `name` with its parents' keys under its own; `chain` the lanes being
    /// resolved that led here.
    fn resolve(&mut self, name: &str, chain: &mut Vec<String>) -> Option<Value> {
        if let Some(done) = self.done.get(name) {
            return done.clone();
        }
        let mut own = self.written.get(name)?.clone();
        let parent = own.remove("inherits");
        let out = match parent {
            None => Some(own),
            Some(p) => {
                let at = format!("lanes.{name}.inherits");
                let parent_name = p.as_str().map(str::to_string);
                match parent_name {
                    None => {
                        self.errors
                            .push((at, "`inherits` names one lane".to_string()));
                        None
                    }
                    Some(pn) if chain.contains(&pn) || pn == name => {
                        let start = chain.iter().position(|c| *c == pn).unwrap_or(0);
                        let mut cycle: Vec<String> = chain[start..].to_vec();
                        cycle.push(name.to_string());
                        cycle.push(pn.clone());
                        self.errors.push((
                            at,
                            format!("lanes inherit in a cycle: {}", cycle.join(" -> ")),
                        ));
                        None
                    }
                    Some(pn) if !self.written.contains_key(&pn) => {
                        let known: Vec<&str> = self.written.keys().map(String::as_str).collect();
                        let mut path = chain.clone();
                        path.push(name.to_string());
                        self.errors.push((
                            at,
                            format!(
                                "unknown lane `{}` to inherit from ({} -> {}; defined: {})",
                                crate::base::error::clip(&pn, 40),
                                path.join(" -> "),
                                crate::base::error::clip(&pn, 40),
                                known.join(", ")
                            ),
                        ));
                        None
                    }
                    Some(pn) => {
                        chain.push(name.to_string());
                        let parent = self.resolve(&pn, chain);
                        chain.pop();
                        parent.map(|p| merged(p, own))
                    }
                }
            }
        };
        self.done.insert(name.to_string(), out.clone());
        out
    }
}

/// `over`'s keys over `base`'s: each replaces whole, but `env`, merged per variable.
fn merged(mut base: Value, over: Value) -> Value {
    let (Kind::Map(base_entries), Kind::Map(over_entries)) = (&mut base.kind, over.kind) else {
        return base;
    };
    for (k, v) in over_entries {
        let name = k.as_str().map(str::to_string);
        match base_entries
            .iter_mut()
            .find(|(bk, _)| bk.as_str().is_some() && bk.as_str() == name.as_deref())
        {
            Some((_, bv)) if name.as_deref() == Some("env") => {
                *bv = merged(bv.clone(), v);
            }
            Some(slot) => *slot = (k, v),
            None => base_entries.push((k, v)),
        }
    }
    base
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_replace_and_env_merges() {
        let base = super::super::yaml::parse("run: a\nenv: {X: '1', Y: '1'}\nargs: [p]\n").unwrap();
        let over = super::super::yaml::parse("env: {Y: '2'}\nargs: [q]\n").unwrap();
        let m = merged(base, over);
        let env = m.entry("env").unwrap().1;
        assert_eq!(env.entry("X").unwrap().1.as_str(), Some("1"));
        assert_eq!(env.entry("Y").unwrap().1.as_str(), Some("2"));
        assert_eq!(m.entry("run").unwrap().1.as_str(), Some("a"));
        let Kind::Seq(args) = &m.entry("args").unwrap().1.kind else {
            panic!("a list")
        };
        assert_eq!(args.len(), 1);
        assert_eq!(args[0].as_str(), Some("q"));
    }
}
