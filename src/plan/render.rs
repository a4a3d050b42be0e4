//! Commands as they run, are shown and are keyed: a step's command with its path
//! placeholders masked (keys), shown as `<out>` (`--dry-run`) or filled (running), and
//! the one renderer of device commands (the preview and the inner run).

use std::path::Path;

use super::{Fill, Plan, Step};
use crate::base::template::{Ph, Template, Val};
use crate::cache::Kind;
use crate::manifest::{Kernel, Toolchain};

impl Plan {
    /// The step's command with everything filled but what `fill` decides.
    pub fn command(&self, step: &Step, fill: &Fill) -> String {
        let s = self.scene(step);
        match step.kind {
            Kind::Compiled => unreachable!("{}", Kind::NOT_A_STEP),
            Kind::Kernel => {
                let (k, tc) = self.kernel(step);
                let path = |ph: Ph| -> Val {
                    match (fill, ph) {
                        (Fill::Mask, _) => Val::Mask(ph),
                        (Fill::DryRun, Ph::Source) | (Fill::Real { .. }, Ph::Source) => {
                            Val::One(k.source.rel.clone().into())
                        }
                        (Fill::DryRun, _) => Val::Raw(format!("<{}>", ph.name()).into()),
                        (Fill::Real { out, .. }, Ph::Out) => {
                            Val::One(out.to_string_lossy().to_string().into())
                        }
                        (Fill::Real { depfile, .. }, _) => {
                            Val::One(depfile.to_string_lossy().to_string().into())
                        }
                    }
                };
                let mut value = |ph: Ph| match ph {
                    Ph::Source | Ph::Out | Ph::Depfile => path(ph),
                    Ph::Includes => Val::Many(include_words(tc, k).into()),
                    Ph::Flags => Val::Many(k.flags.as_slice().into()),
                    Ph::Platform => Val::One(s.platform.as_str().into()),
                    Ph::Scene => Val::One(s.name.as_str().into()),
                    Ph::Kernel => Val::One(k.name.as_str().into()),
                    _ => Val::Raw("".into()),
                };
                let mut cmd = tc.compile.render(&mut value);
                if let Some(dep) = &tc.depfile {
                    cmd.push(' ');
                    cmd.push_str(&dep.render(&mut value));
                }
                cmd
            }
            Kind::Fixture | Kind::Golden | Kind::Prepare | Kind::Test => {
                let g = self.gen(step);
                let platform = self.step_context(step).0;
                let ps = &self.scenes[step.scene];
                // A golden's one dep is its fixture; a test's are its scene's fixture and golden.
                let fixture = match step.kind {
                    Kind::Test => ps.fixture.map(|f| self.artifact(&self.steps[f])),
                    _ => step.deps.first().map(|&f| self.artifact(&self.steps[f])),
                };
                let golden = match step.kind {
                    Kind::Test => ps.golden.map(|g| self.artifact(&self.steps[g])),
                    _ => None,
                };
                g.run.render(|ph| match (ph, fill) {
                    (Ph::Out, Fill::Mask)
                    | (Ph::Depfile, Fill::Mask)
                    | (Ph::Fixture, Fill::Mask)
                    | (Ph::Golden, Fill::Mask)
                    | (Ph::Threads, Fill::Mask) => Val::Mask(ph),
                    (Ph::Out, Fill::DryRun) => Val::Raw("<out>".into()),
                    (Ph::Depfile, Fill::DryRun) => Val::Raw("<depfile>".into()),
                    (Ph::Out, Fill::Real { out, .. }) => {
                        Val::One(out.to_string_lossy().to_string().into())
                    }
                    (Ph::Depfile, Fill::Real { depfile, .. }) => {
                        Val::One(depfile.to_string_lossy().to_string().into())
                    }
                    (Ph::Fixture, _) => Val::One(
                        fixture
                            .as_ref()
                            .map(|p| p.to_string_lossy().to_string())
                            .unwrap_or_default()
                            .into(),
                    ),
                    (Ph::Golden, _) => Val::One(
                        golden
                            .as_ref()
                            .map(|p| p.to_string_lossy().to_string())
                            .unwrap_or_default()
                            .into(),
                    ),
                    (Ph::Threads, _) => Val::One(step.threads.to_string().into()),
                    (Ph::Scene, _) => Val::One(s.name.as_str().into()),
                    (Ph::Platform, _) => Val::One(platform.into()),
                    _ => Val::Raw("".into()),
                })
            }
        }
    }
}

fn include_words(tc: &Toolchain, k: &Kernel) -> Vec<String> {
    let flag = &tc.include_flag;
    let mut out = Vec::new();
    for d in &k.include_dirs {
        if flag.ends_with(char::is_whitespace) {
            out.push(flag.trim_end().to_string());
            out.push(d.rel.clone());
        } else {
            out.push(format!("{flag}{}", d.rel));
        }
    }
    out
}

/// A device step's command: every placeholder filled; `{devices}` and `{outputs}` (the
/// scene's own outputs directory) shown as `<devices>` and `<outputs>` when `at` is
/// None (`--dry-run`). The one renderer of device commands, for the preview and for the
/// inner run.
pub fn render_device_template(
    t: &Template,
    scene: &str,
    platform: &str,
    kernels: &Path,
    fixture: Option<&Path>,
    golden: Option<&Path>,
    at: Option<(&str, &Path)>,
) -> String {
    let p = |p: Option<&Path>| {
        p.map(|p| p.to_string_lossy().to_string())
            .unwrap_or_default()
    };
    t.render(|ph| match ph {
        Ph::Kernels => Val::One(kernels.to_string_lossy().to_string().into()),
        Ph::Fixture => Val::One(p(fixture).into()),
        Ph::Golden => Val::One(p(golden).into()),
        Ph::Devices => match at {
            Some((d, _)) => Val::One(d.to_string().into()),
            None => Val::Raw("<devices>".into()),
        },
        Ph::Outputs => match at {
            Some((_, o)) => Val::One(o.to_string_lossy().to_string().into()),
            None => Val::Raw("<outputs>".into()),
        },
        Ph::Scene => Val::One(scene.to_string().into()),
        Ph::Platform => Val::One(platform.to_string().into()),
        _ => Val::Raw("".into()),
    })
}
