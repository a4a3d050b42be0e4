//! The top level of the manifest and the sections that are not scenes: `version`,
//! `platform`, `env`, `suite_args`, `cache`, `toolchains`, `lock`, `prepare` and
//! `scenes_from` (nothing runs here), each validated into its part of the `Manifest`;
//! the scenes, the lanes and the remote cache are taken apart by their own files.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::signing::{OldKey, OldKeys};
use super::validate::MAX_DEVICES;
use super::validate::{bad_name, valid_env_name, valid_name, Ctx};
use super::yaml::{self, Node as Value};
use super::{raw, suite_args};
use super::{CacheConfig, Generator, LockConfig, Manifest, Prepare, Toolchain};
use super::{DEFAULT_MAX_AGE, GENERATOR_TIMEOUT};
use crate::base::template::{allowed, Ph, Template, Val};

impl Ctx {
    pub(super) fn manifest(&mut self, mut top: Value) -> Option<Manifest> {
        if !matches!(top.kind, yaml::Kind::Map(_)) {
            self.err_at(
                "",
                top.pos(),
                "the manifest must be a mapping with `version: 1` and `scenes:`",
            );
            return None;
        }
        self.check_keys(
            &mut top,
            "",
            raw::fields_of::<raw::Top>().unwrap_or_default(),
        );
        let mut field = |name: &str| top.remove(name);

        match field("version") {
            None => self.err("", "missing field `version` (write `version: 1`)"),
            Some(v) if v.as_int() == Some(1) => {}
            Some(other) => self.err_at(
                "version",
                other.pos(),
                format!(
                    "unsupported manifest version {} (this scenerun reads version 1)",
                    crate::base::error::clip(other.as_str().unwrap_or("(not a number)"), 40)
                ),
            ),
        }
        let platform = match field("platform") {
            None => "default".to_string(),
            Some(v) => self.take::<String>(v, "platform").unwrap_or_default(),
        };
        let env_raw = field("env")
            .and_then(|v| self.take::<BTreeMap<String, raw::Scalar>>(v, "env"))
            .unwrap_or_default();
        let env = self.env(env_raw, "env");
        let profile_suite_args = self.selections(field("selections"), field("profiles"));
        self.check_selection_words();
        let suite_args_words =
            field("suite_args").and_then(|v| self.take::<Vec<String>>(v, "suite_args"));
        if let Some(words) = profile_suite_args.or(suite_args_words) {
            match suite_args::expansion(&words) {
                Ok(e) => self.suite_args = Some(e),
                Err(e) => self.err("suite_args", e.to_string()),
            }
        }

        let mut old_signing = OldKeys::default();
        let cache = self.cache_config(field("cache"), &mut old_signing);
        let signing = self.signing(field("signing"), old_signing);

        let toolchains = self.toolchains(field("toolchains"));

        let lane_defaults = field("lane_defaults");
        let lanes = self.lanes(field("lanes"), lane_defaults);
        let lock = self.lock(field("lock"));

        let generators = field("scenes_from")
            .map(|v| self.generators(v, &platform))
            .unwrap_or_default();
        let workers = self.workers(field("workers"));
        let prepare = self.prepare_steps(field("prepare"));
        let compile_cache = self.compile_cache(field("compile_cache"));
        let fork_server = self.fork_server(field("fork_server"));
        let scenes = match field("scenes") {
            None if !generators.is_empty() => Vec::new(),
            None => {
                self.err("", "missing field `scenes`");
                Vec::new()
            }
            Some(v) => self.scenes(v, !generators.is_empty(), &platform, &env, &toolchains),
        };

        Some(Manifest {
            file: PathBuf::from(&self.file),
            dir: self.dir.clone(),
            platform,
            env,
            cache,
            signing,
            toolchains,
            lock,
            lanes,
            scenes,
            generators,
            prepare,
            workers,
            compile_cache,
            fork_server,
            selections: std::mem::take(&mut self.selections_declared),
            profile: self.profile.clone(),
            notes: std::mem::take(&mut self.notes),
            layout: Default::default(),
        })
    }

    /// `cache:`, resolved against the manifest's directory, with its defaults; its
    /// signing keys of earlier releases go to `old` (`signing`).
    pub(super) fn cache_config(&mut self, v: Option<Value>, old: &mut OldKeys) -> CacheConfig {
        let cache_raw = v
            .and_then(|v| self.take::<raw::Cache>(v, "cache"))
            .unwrap_or_default();
        old.0
            .extend(cache_raw.verify_key.map(|k| (OldKey::CacheVerifyKey, k)));
        old.0
            .extend(cache_raw.sign_key_env.map(|k| (OldKey::CacheSignKeyEnv, k)));
        CacheConfig {
            dir: cache_raw.dir.as_deref().map(|d| self.dir.join(d)),
            max_size: self.size(cache_raw.max_size, "cache.max_size"),
            max_age: self
                .duration(cache_raw.max_age, "cache.max_age")
                .unwrap_or(DEFAULT_MAX_AGE),
            remote: cache_raw
                .remote
                .and_then(|v| self.remote(v, old))
                .unwrap_or_default(),
        }
    }

    /// `compile_cache.compilers`: program names, each looked up on `PATH` when the lanes
    /// start; a name with a `/`, a space or a character no compiler's name has is an
    /// error, and so is a name given twice.
    pub(super) fn compile_cache(&mut self, v: Option<Value>) -> Vec<String> {
        let Some(c) = v.and_then(|v| self.take::<raw::CompileCache>(v, "compile_cache")) else {
            return Vec::new();
        };
        let mut out: Vec<String> = Vec::new();
        for name in c.compilers {
            let ok = (1..=128).contains(&name.len())
                && name != "."
                && name != ".."
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_.+-".contains(&b));
            if !ok {
                let shown = crate::base::error::clip(&name, 40);
                self.err(
                    "compile_cache.compilers",
                    format!("`{shown}` is not a program name (letters, digits, `_.+-`; no `/`)"),
                );
            } else if out.contains(&name) {
                self.err(
                    "compile_cache.compilers",
                    format!("`{name}` is listed twice"),
                );
            } else {
                out.push(name);
            }
        }
        out
    }

    /// `fork_server:`: its command (no placeholders) and how long it may take to be ready.
    pub(super) fn fork_server(&mut self, v: Option<Value>) -> Option<super::ForkServer> {
        let f = v.and_then(|v| self.take::<raw::ForkServer>(v, "fork_server"))?;
        let run = self.templ(&f.run, "fork_server.run", &[])?;
        let start_timeout = self
            .duration(f.start_timeout, "fork_server.start_timeout")
            .unwrap_or(super::workers::DEFAULT_START_TIMEOUT);
        Some(super::ForkServer { run, start_timeout })
    }

    /// `toolchains:` by name; a broken one is remembered so its kernels are not told
    /// "unknown toolchain" as well.
    pub(super) fn toolchains(&mut self, v: Option<Value>) -> BTreeMap<String, Toolchain> {
        let mut toolchains = BTreeMap::new();
        if let Some(v) = v {
            if let Some(map) = self.take::<BTreeMap<String, Value>>(v, "toolchains") {
                for (name, v) in map {
                    let path = format!("toolchains.{name}");
                    if !valid_name(&name) {
                        self.err(&path, bad_name("toolchain", &name));
                    }
                    let Some(t) = self.take::<raw::Toolchain>(v, &path) else {
                        self.broken_toolchains.push(name);
                        continue;
                    };
                    let compile =
                        self.templ(&t.compile, &format!("{path}.compile"), allowed::COMPILE);
                    let depfile = t
                        .depfile
                        .as_deref()
                        .and_then(|d| self.templ(d, &format!("{path}.depfile"), allowed::DEPFILE));
                    if let Some(compile) = compile {
                        toolchains.insert(
                            name.clone(),
                            Toolchain {
                                name,
                                compile,
                                identity: t.identity,
                                identity_timeout: self
                                    .duration(
                                        t.identity_timeout,
                                        &format!("{path}.identity_timeout"),
                                    )
                                    .unwrap_or(crate::base::identity::DEFAULT_TIMEOUT),
                                depfile,
                                include_flag: t.include_flag.unwrap_or_else(|| "-I".into()),
                            },
                        );
                    } else {
                        self.broken_toolchains.push(name);
                    }
                }
            }
        }
        toolchains
    }

    /// `lock:`, checked: `{run}` in its command, its counts, its variable name.
    pub(super) fn lock(&mut self, v: Option<Value>) -> Option<LockConfig> {
        v.and_then(|v| self.take::<raw::Lock>(v, "lock"))
            .and_then(|l| {
                let submit = self.templ(&l.submit, "lock.submit", allowed::LOCK)?;
                if !submit.uses(Ph::Run) {
                    self.err(
                        "lock.submit",
                        "the lock command must contain {run} (the device steps run through it)",
                    );
                }
                if l.device_count == Some(0) {
                    self.err("lock.device_count", "device_count must be at least 1");
                }
                if l.device_count.is_some_and(|n| n > MAX_DEVICES) {
                    self.err(
                        "lock.device_count",
                        format!("device_count must be at most {MAX_DEVICES}"),
                    );
                }
                let device_env = l.device_env.unwrap_or_else(|| "TASK_DEVICE".into());
                if !valid_env_name(&device_env) {
                    self.err(
                        "lock.device_env",
                        format!("`{device_env}` is not a valid variable name"),
                    );
                }
                let release_timeout = self.duration(l.release_timeout, "lock.release_timeout");
                let grace = self.duration(l.grace, "lock.grace");
                let device_fault = self.device_fault(l.device_fault);
                Some(LockConfig {
                    submit,
                    device_env,
                    device_count: l.device_count,
                    release_timeout,
                    grace,
                    device_fault,
                })
            })
    }

    /// `prepare:`: a list of named steps, names unique.
    pub(super) fn prepare_steps(&mut self, v: Option<Value>) -> Vec<Prepare> {
        let mut out: Vec<Prepare> = Vec::new();
        let mut seen: Vec<String> = Vec::new();
        let Some(list) = v.and_then(|v| self.take::<Vec<Value>>(v, "prepare")) else {
            return out;
        };
        for (i, v) in list.into_iter().enumerate() {
            let path = format!("prepare[{i}]");
            let Some(p) = self.take::<raw::Prepare>(v, &path) else {
                continue;
            };
            if !valid_name(&p.name) {
                self.err(&format!("{path}.name"), bad_name("prepare step", &p.name));
            } else if let Some(first) = seen.iter().position(|o| *o == p.name) {
                self.err(
                    &format!("{path}.name"),
                    format!(
                        "duplicate prepare step `{}` (first defined at prepare[{first}])",
                        p.name
                    ),
                );
            }
            seen.push(p.name.clone());
            let only = self.prepare_selections(p.selections.as_deref(), &path);
            // Once per selection (`<name>.<selection>`, only those of its `selections:`)
            // when it names the selections' placeholders.
            let runs = match self.per_selection(&p.run, &format!("{path}.run")) {
                Some(runs) => runs
                    .into_iter()
                    .filter(|(s, _)| only.is_empty() || only.contains(s))
                    .map(|(s, r)| (format!("{}.{s}", p.name), r, vec![s]))
                    .collect(),
                None => vec![(p.name.clone(), p.run.clone(), only)],
            };
            for (name, run, selections) in runs {
                let g = raw::GenStep {
                    run,
                    inputs: p.inputs.clone(),
                    persist: Some(p.persist.unwrap_or(false)),
                    memory: p.memory.clone(),
                    threads: p.threads,
                    timeout: p.timeout.clone(),
                    identity: p.identity.clone(),
                    worker: p.worker.clone(),
                };
                if let Some(step) = self.gen_fields(g, &path, allowed::PREPARE) {
                    out.push(Prepare {
                        name,
                        step,
                        selections,
                    });
                }
            }
        }
        out
    }

    /// A prepare step's `selections:`: names under `selections:`, each once (an error
    /// at `prepare[i].selections` otherwise); empty when not given.
    fn prepare_selections(&mut self, names: Option<&[String]>, path: &str) -> Vec<String> {
        let Some(names) = names else {
            return Vec::new();
        };
        let at = format!("{path}.selections");
        if names.is_empty() {
            self.err(
                &at,
                "an empty list: leave `selections` out to mean every selection",
            );
        }
        let mut out: Vec<String> = Vec::new();
        for n in names {
            if !self.selections_declared.iter().any(|s| s.name == *n) {
                let msg = self.unknown_selection(n);
                self.err(&at, msg);
            } else if out.contains(n) {
                self.err(&at, format!("selection `{n}` is named twice"));
            } else {
                out.push(n.clone());
            }
        }
        out
    }

    /// Validate `scenes_from:` (commands and inputs); nothing runs here.
    pub(super) fn generators(&mut self, v: Value, platform: &str) -> Vec<Generator> {
        let Some(list) = self.take::<Vec<Value>>(v, "scenes_from") else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, v) in list.into_iter().enumerate() {
            let path = format!("scenes_from[{i}]");
            let Some(g) = self.take::<raw::Generator>(v, &path) else {
                continue;
            };
            let inputs = self.inputs(&g.inputs, &path);
            let timeout = self.duration(g.timeout, &format!("{path}.timeout"));
            // Once per selection when it names the selections' placeholders.
            let runs = match self.per_selection(&g.run, &format!("{path}.run")) {
                Some(runs) => runs.into_iter().map(|(s, r)| (Some(s), r)).collect(),
                None => vec![(None, g.run.clone())],
            };
            for (selection, text) in runs {
                let run = self.templ(&text, &format!("{path}.run"), &[Ph::Platform]);
                if let Some(run) = run {
                    out.push(Generator {
                        index: i,
                        run: fill_platform(&run, platform),
                        inputs: inputs.clone(),
                        timeout: timeout.unwrap_or(GENERATOR_TIMEOUT),
                        selection,
                    });
                }
            }
        }
        out
    }
}

fn fill_platform(t: &Template, platform: &str) -> String {
    t.render(|ph| match ph {
        Ph::Platform => Val::One(platform.to_string().into()),
        _ => Val::Raw("".into()),
    })
}
