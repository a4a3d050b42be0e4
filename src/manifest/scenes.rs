//! Scenes and their warm steps: `scenes:` (names unique), each scene's kernels,
//! fixture and golden, and their `inputs`; a scene's device step is `lanes.rs`'s.
//! Invariant: a scene that is invalid is still looked at whole, so every error of it is
//! reported, and placeholders follow the steps it has as written.

use std::collections::{BTreeMap, HashMap};

use super::validate::{bad_name, valid_name, Ctx};
use super::validate::{MAX_LABEL, MAX_THREADS};
use super::yaml::Node as Value;
use super::{lanes, raw};
use super::{FileRef, GenStep, Kernel, Scene, Toolchain};
use crate::base::template::{allowed, Ph};

impl Ctx {
    /// `scenes:`, each validated, names unique (`generated`: `scenes_from` may add the
    /// scenes, so an empty list is fine).
    pub(super) fn scenes(
        &mut self,
        v: Value,
        generated: bool,
        platform: &str,
        env: &BTreeMap<String, String>,
        toolchains: &BTreeMap<String, Toolchain>,
    ) -> Vec<Scene> {
        let mut scenes = Vec::new();
        if let Some(list) = self.take::<Vec<Value>>(v, "scenes") {
            if list.is_empty() && !generated {
                self.err("scenes", "the manifest has no scenes");
            }
            let mut seen: HashMap<String, usize> = HashMap::new();
            for (i, v) in list.into_iter().enumerate() {
                let path = format!("scenes[{i}]");
                if let Some(s) = self.scene(v, &path, platform, env, toolchains) {
                    if let Some(first) = seen.get(&s.name) {
                        self.err(
                            &format!("{path}.name"),
                            format!(
                                "duplicate scene name `{}` (first defined at scenes[{first}])",
                                s.name
                            ),
                        );
                    } else {
                        seen.insert(s.name.clone(), i);
                    }
                    scenes.push(s);
                }
            }
        }
        scenes
    }

    pub(super) fn scene(
        &mut self,
        v: Value,
        path: &str,
        platform: &str,
        top_env: &BTreeMap<String, String>,
        toolchains: &BTreeMap<String, Toolchain>,
    ) -> Option<Scene> {
        let s = self.take::<raw::Scene>(v, path)?;
        if !valid_name(&s.name) {
            self.err(&format!("{path}.name"), bad_name("scene", &s.name));
        }
        let mut env = top_env.clone();
        env.extend(self.env(s.env, &format!("{path}.env")));

        // Which steps the scene has as written: an invalid fixture still makes `{fixture}`
        // a valid placeholder for its golden and device step (one error, not three).
        let has_kernels = !s.kernels.is_empty();
        let (has_fixture, has_golden, has_device) =
            (s.fixture.is_some(), s.golden.is_some(), s.device.is_some());
        let kernels = self.scene_kernels(s.kernels, path, &s.name, toolchains);

        let fixture = s
            .fixture
            .and_then(|v| self.gen_step(v, &format!("{path}.fixture"), allowed::FIXTURE));
        let golden_allowed: &[Ph] = if has_fixture {
            allowed::GOLDEN
        } else {
            allowed::FIXTURE
        };
        let golden = s
            .golden
            .and_then(|v| self.gen_step(v, &format!("{path}.golden"), golden_allowed));
        let test = s.test.and_then(|v| {
            let at = format!("{path}.test");
            self.test_step(v, &at, &s.name, (has_fixture, has_golden, has_device))
        });
        let steps = lanes::Steps {
            kernels: has_kernels,
            fixture: has_fixture,
            golden: has_golden,
        };
        let selection = self.scene_selection(s.selection, path, &s.name);
        let mut device = s.device.and_then(|v| {
            self.device_step(v, &format!("{path}.device"), steps, selection.as_ref())
        });
        for (key, value) in [("nodeid", &s.nodeid), ("case", &s.case)] {
            if let Some(v) = value {
                self.check_label(&format!("{path}.{key}"), v);
            }
        }
        if let Some(d) = device.as_mut() {
            d.node = s.nodeid.clone();
        }
        if !has_kernels && !has_fixture && !has_golden && !has_device && test.is_none() {
            self.err(
                path,
                format!(
                    "scene `{}` has no steps (kernels, fixture, golden, test or device)",
                    s.name
                ),
            );
        }
        Some(Scene {
            name: match &selection {
                Some(sel) => format!("{}/{}", sel.name, s.name),
                None => s.name,
            },
            nodeid: s.nodeid,
            case: s.case,
            selection: selection.map(|sel| sel.name),
            platform: s.platform.unwrap_or_else(|| platform.to_string()),
            tags: s.tags,
            env,
            kernels,
            fixture,
            golden,
            test,
            device,
        })
    }

    /// The selection of scene `name` at `path`: its `selection:` key (a declared one),
    /// else the one of the generator that printed it. A scene of no selection may not
    /// be named like one (its logs would sit among that selection's).
    fn scene_selection(
        &mut self,
        key: Option<String>,
        path: &str,
        name: &str,
    ) -> Option<super::NamedSelection> {
        let at = format!("{path}.selection");
        let wanted = match (key, self.current_selection.clone()) {
            (Some(k), Some(g)) if k != g => {
                self.err(
                    &at,
                    format!("the scene says selection `{k}`, and its generator runs for `{g}`"),
                );
                return None;
            }
            (k, g) => k.or(g),
        };
        let Some(wanted) = wanted else {
            if self.selections_declared.iter().any(|s| s.name == name) {
                self.err(
                    &format!("{path}.name"),
                    format!("scene `{name}` of no selection is named like a selection"),
                );
            }
            return None;
        };
        let found = self
            .selections_declared
            .iter()
            .find(|s| s.name == wanted)
            .cloned();
        if found.is_none() {
            let msg = self.unknown_selection(&wanted);
            self.err(&at, msg);
        }
        found
    }

    /// A scene's `kernels:`, each valid and named once in the scene.
    fn scene_kernels(
        &mut self,
        list: Vec<Value>,
        path: &str,
        scene: &str,
        toolchains: &BTreeMap<String, Toolchain>,
    ) -> Vec<Kernel> {
        // Exact sizes: 20,000 kernels with growth slack are megabytes of a plan's peak.
        let mut kernels = Vec::with_capacity(list.len());
        let mut kernel_names: HashMap<String, usize> = HashMap::new();
        for (i, kv) in list.into_iter().enumerate() {
            let kp = format!("{path}.kernels[{i}]");
            let Some(k) = self.take::<raw::Kernel>(kv, &kp) else {
                continue;
            };
            if !valid_name(&k.name) {
                self.err(&format!("{kp}.name"), bad_name("kernel", &k.name));
            }
            if let Some(first) = kernel_names.get(&k.name) {
                self.err(
                    &format!("{kp}.name"),
                    format!(
                        "duplicate kernel name `{}` in scene `{scene}` (first at kernels[{first}])",
                        k.name
                    ),
                );
            } else {
                kernel_names.insert(k.name.clone(), i);
            }
            if let Some(k) = self.kernel(k, &kp, toolchains) {
                kernels.push(k);
            }
        }
        kernels
    }

    /// A scene's `test:`: a generator step whose artifact is a verdict; `{fixture}` and
    /// `{golden}` only when the scene has them; never beside a device step; `persist`
    /// always false (a verdict is this checkout's, never the shared cache's).
    fn test_step(
        &mut self,
        v: Value,
        path: &str,
        scene: &str,
        (fixture, golden, device): (bool, bool, bool),
    ) -> Option<GenStep> {
        if device {
            self.err(
                path,
                format!(
                    "scene `{scene}` has both test and device: a scene's test runs in warm without the lock, its device step inside it; give it one"
                ),
            );
        }
        let g = self.take::<raw::GenStep>(v, path)?;
        let persist = g.persist;
        let allowed: Vec<Ph> = allowed::TEST
            .iter()
            .copied()
            .filter(|&ph| (ph != Ph::Fixture || fixture) && (ph != Ph::Golden || golden))
            .collect();
        let mut step = self.gen_fields(g, path, &allowed)?;
        if persist == Some(true) {
            self.err(
                &format!("{path}.persist"),
                "a test's verdict stays in this checkout's build/scenerun/job/: persist must be false",
            );
        }
        step.persist = false;
        Some(step)
    }

    /// A label a report carries as it is (`nodeid`, `case`): at most 4096 bytes, no
    /// control characters (a NUL or a newline would break junit and the terminal).
    pub(super) fn check_label(&mut self, at: &str, value: &str) {
        if value.is_empty() || value.len() > MAX_LABEL {
            self.err(at, format!("must be 1 to {MAX_LABEL} bytes long"));
        } else if value.chars().any(char::is_control) {
            self.err(
                at,
                "must not contain control characters (NUL, newline, ...)",
            );
        }
    }

    /// One kernel at `kp`: its toolchain (defined), its source (a file) and its include
    /// dirs (one that does not exist is skipped, with a note).
    pub(super) fn kernel(
        &mut self,
        k: raw::Kernel,
        kp: &str,
        toolchains: &BTreeMap<String, Toolchain>,
    ) -> Option<Kernel> {
        if !toolchains.contains_key(&k.toolchain) && !self.broken_toolchains.contains(&k.toolchain)
        {
            let known: Vec<&str> = toolchains.keys().map(String::as_str).collect();
            self.err(
                &format!("{kp}.toolchain"),
                format!(
                    "unknown toolchain `{}` (defined: {})",
                    k.toolchain,
                    if known.is_empty() {
                        "none".into()
                    } else {
                        known.join(", ")
                    }
                ),
            );
        }
        let source = match self.paths.resolve(&k.source) {
            Ok(Some(f)) if !self.paths.is_dir(&f) => Some(f),
            Ok(Some(_)) => {
                self.err(
                    &format!("{kp}.source"),
                    format!("`{}` is not a file", k.source),
                );
                None
            }
            Ok(None) => {
                self.err(
                    &format!("{kp}.source"),
                    format!("source file not found: `{}`", k.source),
                );
                None
            }
            Err(e) => {
                self.err(&format!("{kp}.source"), e.to_string());
                None
            }
        };
        let mut include_dirs = Vec::with_capacity(k.include_dirs.len());
        for (j, d) in k.include_dirs.iter().enumerate() {
            let expanded = self.paths.expand(d);
            // `$VAR` of an unset variable names no dir: skipped, like a missing one.
            let resolved = if expanded.is_empty() && !d.is_empty() {
                Ok(None)
            } else {
                self.paths.resolve(&expanded)
            };
            match resolved {
                Ok(Some(f)) if self.paths.is_dir(&f) => include_dirs.push(f),
                Ok(_) => self.notes.push(format!(
                    "{}.include_dirs[{j}]: `{d}`{} does not exist; skipped",
                    kp,
                    if expanded != *d {
                        format!(" (= `{expanded}`)")
                    } else {
                        String::new()
                    }
                )),
                Err(e) => self.err(&format!("{kp}.include_dirs[{j}]"), e.to_string()),
            }
        }
        Some(Kernel {
            name: k.name,
            toolchain: k.toolchain,
            source: source?,
            include_dirs,
            flags: k.flags,
        })
    }

    /// `<path>.inputs`: every pattern expanded (sorted, without duplicates); a pattern
    /// that matches nothing is an error at its position.
    pub(super) fn inputs(&mut self, patterns: &[String], path: &str) -> Vec<FileRef> {
        let mut inputs = Vec::new();
        for (i, pattern) in patterns.iter().enumerate() {
            let ip = format!("{path}.inputs[{i}]");
            match self.paths.glob_inputs(pattern) {
                Ok(files) if files.is_empty() => {
                    self.err(&ip, format!("input `{pattern}` matches no file"))
                }
                Ok(files) => inputs.extend(files),
                Err(e) => self.err(&ip, e.to_string()),
            }
        }
        inputs.sort();
        inputs.dedup();
        inputs
    }

    pub(super) fn gen_step(&mut self, v: Value, path: &str, allowed: &[Ph]) -> Option<GenStep> {
        let g = self.take::<raw::GenStep>(v, path)?;
        self.gen_fields(g, path, allowed)
    }

    pub(super) fn gen_fields(
        &mut self,
        g: raw::GenStep,
        path: &str,
        allowed: &[Ph],
    ) -> Option<GenStep> {
        let run = self.templ(&g.run, &format!("{path}.run"), allowed);
        let inputs = self.inputs(&g.inputs, path);
        if g.threads == Some(0) {
            self.err(&format!("{path}.threads"), "threads must be at least 1");
        }
        self.at_most(g.threads, &format!("{path}.threads"), MAX_THREADS);
        let memory = self.size(g.memory, &format!("{path}.memory"));
        let timeout = self.duration(g.timeout, &format!("{path}.timeout"));
        let worker = self.worker_ref(g.worker, path);
        Some(GenStep {
            run: run?,
            inputs,
            persist: g.persist.unwrap_or(true),
            memory,
            threads: g.threads.unwrap_or(1).max(1),
            timeout,
            identity: g.identity,
            worker,
        })
    }
}
