//! What `device` says when artifacts are missing (exit 6, the lock not taken): a summary
//! that stays a few lines on a suite of thousands of steps — counts per kind, the first
//! scenes and what each misses, the cache dir that was checked and which setting chose
//! it. Every missing artifact is still listed per scene in report.json.

use std::collections::BTreeMap;
use std::path::Path;

use crate::base::layout::CacheFrom;
use crate::device::not_warm::Missing;

/// `compile add`, or just `fixture` where the step is named after its kind.
fn short(m: &Missing) -> String {
    match m.id.name == m.id.label() {
        true => m.id.label().to_string(),
        false => format!("{} {}", m.id.label(), m.id.name),
    }
}

/// Scenes named in full before "and N more scenes".
const SCENES_SHOWN: usize = 3;

/// The error's text: counts, the first scenes, the cache dir checked.
pub fn summary(missing: &[Missing], cache: &Path, from: CacheFrom) -> String {
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    let mut scenes: Vec<(&str, Vec<String>)> = Vec::new();
    for m in missing {
        *kinds.entry(m.id.label()).or_default() += 1;
        match scenes.iter_mut().find(|(n, _)| *n == m.id.scene) {
            Some((_, steps)) => steps.push(short(m)),
            None => scenes.push((&m.id.scene, vec![short(m)])),
        }
    }
    let counts: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
    let mut out = format!(
        "not warm: {} missing ({}) in {}; the lock was not taken",
        crate::base::units::count(missing.len(), "artifact"),
        counts.join(", "),
        crate::base::units::count(scenes.len(), "scene")
    );
    for (name, steps) in scenes.iter().take(SCENES_SHOWN) {
        out.push_str(&format!("\n  {name}: {}", steps.join(", ")));
    }
    if scenes.len() > SCENES_SHOWN {
        let more = scenes.len() - SCENES_SHOWN;
        let noun = if more == 1 { "scene" } else { "scenes" };
        out.push_str(&format!(
            "\n  and {more} more {noun} (each listed in report.json)"
        ));
    }
    out.push_str(&format!(
        "\n  cache dir checked: {} (from {from})",
        cache.display()
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::stepid::Kind;
    use crate::base::stepid::StepId;

    fn m(scene: usize, kind: Kind, step: &str) -> Missing {
        Missing {
            scene,
            id: StepId::new(kind, &format!("s{scene}"), step),
            key: "0123456789abcdef".into(),
        }
    }

    #[test]
    fn a_thousand_missing_artifacts_are_a_few_lines() {
        let missing: Vec<Missing> = (0..500)
            .flat_map(|i| [m(i, Kind::Kernel, "k"), m(i, Kind::Fixture, "fixture")])
            .collect();
        let text = summary(&missing, Path::new("/c"), CacheFrom::Env);
        assert_eq!(text.lines().count(), 6, "{text}");
        assert!(
            text.contains("1000 artifacts missing (500 compile, 500 fixture) in 500 scenes"),
            "{text}"
        );
        assert!(text.contains("s0: compile k, fixture\n"), "{text}");
        assert!(text.contains("and 497 more scenes"), "{text}");
        assert!(text.contains("/c (from $SCENERUN_CACHE_DIR)"), "{text}");
    }

    /// The summary `device` prints for a few missing artifacts and for many, as the
    /// terminal shows it (through `error::render`).
    #[test]
    fn the_not_warm_summary_as_printed() {
        let few = vec![
            m(0, Kind::Kernel, "add"),
            m(0, Kind::Fixture, "fixture"),
            m(1, Kind::Golden, "golden"),
        ];
        let many: Vec<Missing> = (0..5)
            .flat_map(|i| [m(i, Kind::Kernel, "k"), m(i, Kind::Golden, "golden")])
            .collect();
        let four: Vec<Missing> = (0..4).map(|i| m(i, Kind::Fixture, "fixture")).collect();
        let text = [
            summary(&few, Path::new("/c"), CacheFrom::Manifest),
            summary(&many, Path::new("/c"), CacheFrom::Env),
            summary(&four, Path::new("/c"), CacheFrom::Flag),
        ]
        .map(|s| {
            format!(
                "{}\n",
                crate::base::error::render(&anyhow::Error::new(
                    crate::base::error::Error::NotWarm(s)
                ))
            )
        })
        .join("---\n");
        insta::assert_snapshot!("not_warm", text);
    }
}
