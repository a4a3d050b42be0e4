//! Selection: `-k`, `--tag`, `--skip-tag`, `--platform`, `--selection`, `--partition K/N`. Partitions
//! come from a hash of the scene name alone, so adding or filtering other scenes never
//! moves a scene to another shard.

use std::path::PathBuf;

use crate::manifest::Scene;

/// Which scenes a command works on (from `-k`, `--tag`, `--skip-tag`, `--platform`,
/// `--partition`, `--changed`, `--changed-since`, `--no-scenes`).
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Scene name substrings, or globs when they have `*?[` (any matches).
    pub patterns: Vec<String>,
    /// Only scenes with one of these tags.
    pub tags: Vec<String>,
    /// Drop scenes with one of these tags.
    pub skip_tags: Vec<String>,
    pub platform: Option<String>,
    /// Only scenes of these selections of the manifest (`--selection`, any).
    pub selections: Vec<String>,
    pub partition: Option<Partition>,
    /// Only scenes whose inputs include one of these paths (relative to the current dir).
    pub changed: Vec<PathBuf>,
    /// Only scenes whose inputs changed since this git revision.
    pub changed_since: Option<String>,
    pub no_scenes: NoScenes,
    /// The scenes `--changed`/`--changed-since` found affected (set by the glue).
    pub affected: Option<Vec<String>>,
}

/// What an empty selection means.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NoScenes {
    /// Exit 5.
    #[default]
    Fail,
    /// Exit 0; `device` takes no lock.
    Pass,
}

/// A parsed `--partition K/N` (1-based K).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    pub k: u64,
    pub n: u64,
}

impl Partition {
    pub fn parse(text: &str) -> Result<Partition, BadPartition> {
        let bad = || BadPartition(text.to_string());
        let (k, n) = text.split_once('/').ok_or_else(bad)?;
        let k: u64 = k.trim().parse().map_err(|_| bad())?;
        let n: u64 = n.trim().parse().map_err(|_| bad())?;
        if n == 0 || k == 0 || k > n {
            return Err(bad());
        }
        Ok(Partition { k, n })
    }

    pub fn contains(&self, name: &str) -> bool {
        shard_of(name, self.n) == self.k - 1
    }
}

/// A `--partition` that is not K/N with 1 ≤ K ≤ N (the text given).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadPartition(pub String);

impl std::fmt::Display for BadPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "bad --partition `{}`: write K/N with 1 ≤ K ≤ N, e.g. 1/2",
            self.0
        )
    }
}

impl std::error::Error for BadPartition {}

/// The 0-based shard of a scene name among `n`.
pub fn shard_of(name: &str, n: u64) -> u64 {
    let h = blake3::hash(name.as_bytes());
    let v = u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes"));
    v % n
}

fn matches_pattern(pattern: &str, name: &str) -> bool {
    if pattern.contains(['*', '?', '[']) {
        glob::Pattern::new(pattern)
            .map(|p| p.matches(name))
            .unwrap_or(false)
    } else {
        name.contains(pattern)
    }
}

/// Every `--selection` names one of the manifest's `selections:` (else exit 4 listing
/// them).
pub fn check_selections(m: &crate::manifest::Manifest, sel: &Selection) -> anyhow::Result<()> {
    for name in &sel.selections {
        if !m.selections.iter().any(|s| &s.name == name) {
            let known: Vec<&str> = m.selections.iter().map(|s| s.name.as_str()).collect();
            return Err(crate::base::error::err!(
                Usage,
                "unknown selection `{}` (--selection; the manifest's: {})",
                crate::base::error::clip(name, 40),
                if known.is_empty() {
                    "none".into()
                } else {
                    known.join(", ")
                }
            ));
        }
    }
    Ok(())
}

/// The indices of the selected scenes, in manifest order. Nothing selected is exit 5 with
/// a message that says what each filter removed.
pub fn select(scenes: &[Scene], sel: &Selection) -> anyhow::Result<Vec<usize>> {
    let partition = sel.partition;
    for p in &sel.patterns {
        if p.contains(['*', '?', '[']) {
            glob::Pattern::new(p)
                .map_err(|e| crate::base::error::err!(Usage, "bad -k glob `{p}`: {e}"))?;
        }
    }
    type Filter<'a> = (String, Box<dyn Fn(&Scene) -> bool + 'a>);
    let mut filters: Vec<Filter> = Vec::new();
    if !sel.patterns.is_empty() {
        filters.push((
            format!("-k {}", sel.patterns.join(" -k ")),
            Box::new(|s: &Scene| sel.patterns.iter().any(|p| matches_pattern(p, &s.name))),
        ));
    }
    if !sel.tags.is_empty() {
        filters.push((
            format!("--tag {}", sel.tags.join(" --tag ")),
            Box::new(|s: &Scene| sel.tags.iter().any(|t| s.tags.contains(t))),
        ));
    }
    if !sel.skip_tags.is_empty() {
        filters.push((
            format!("--skip-tag {}", sel.skip_tags.join(" --skip-tag ")),
            Box::new(|s: &Scene| !sel.skip_tags.iter().any(|t| s.tags.contains(t))),
        ));
    }
    if let Some(p) = &sel.platform {
        filters.push((
            format!("--platform {p}"),
            Box::new(move |s: &Scene| &s.platform == p),
        ));
    }
    if !sel.selections.is_empty() {
        filters.push((
            format!("--selection {}", sel.selections.join(" --selection ")),
            Box::new(|s: &Scene| {
                s.selection
                    .as_ref()
                    .is_some_and(|n| sel.selections.contains(n))
            }),
        ));
    }
    if let Some(part) = partition {
        filters.push((
            format!("--partition {}/{}", part.k, part.n),
            Box::new(move |s: &Scene| part.contains(&s.name)),
        ));
    }
    if let Some(names) = &sel.affected {
        filters.push((
            "--changed/--changed-since".to_string(),
            Box::new(move |s: &Scene| names.contains(&s.name)),
        ));
    }
    let mut left: Vec<usize> = (0..scenes.len()).collect();
    let mut removed = Vec::new();
    for (label, keep) in &filters {
        let before = left.len();
        left.retain(|&i| keep(&scenes[i]));
        removed.push(format!("{label} removed {}", before - left.len()));
    }
    if left.is_empty() {
        let detail = if removed.is_empty() {
            "the manifest has no scenes".to_string()
        } else {
            format!(
                "of {}: {}",
                crate::base::units::count(scenes.len(), "scene"),
                removed.join(", ")
            )
        };
        return Err(crate::base::error::err!(
            NoneSelected,
            "no scene selected ({detail})"
        ));
    }
    Ok(left)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_parse() {
        assert_eq!(Partition::parse("1/2").unwrap(), Partition { k: 1, n: 2 });
        assert!(Partition::parse("0/2").is_err());
        assert!(Partition::parse("3/2").is_err());
        assert!(Partition::parse("1/0").is_err());
        assert!(Partition::parse("x").is_err());
    }

    #[test]
    fn patterns() {
        assert!(matches_pattern("add", "vector_add"));
        assert!(matches_pattern("vec*", "vector_add"));
        assert!(!matches_pattern("vec?", "vector_add"));
    }
}
