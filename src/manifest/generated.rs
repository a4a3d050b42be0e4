//! What a `scenes_from:` generator printed, read as manifest scenes (YAML or JSON: a list
//! of scenes, or a mapping with `scenes:`), which join the manifest's scenes as if
//! written there. The generators themselves are a section of the top level (`top.rs`);
//! running them, and keeping their output, is `plan::scenes_from`'s. Errors name the
//! generator (`scenes_from[i]` and its command) and the line of its output, taken from
//! the output's nodes; all are exit 4. See docs/pytest.md.

use std::fmt::Write as _;

use super::yaml::{self, Kind};
use anyhow::Result;

use super::{Ctx, Generator, Manifest, Scene};

/// Output a generator may print (docs/manifest.md); more is an error, the rest unread.
pub const MAX_OUTPUT: usize = 64 << 20;

/// Validate a generator's output as manifest scenes; each scene with the line of the
/// output it starts at.
pub fn scenes_of(g: &Generator, text: &str, m: &mut Manifest) -> Result<(Vec<Scene>, Vec<usize>)> {
    let value = yaml::parse(text).map_err(|e| {
        crate::base::error::err!(
            Usage,
            "{} printed invalid YAML/JSON at output line {}, column {}: {}",
            g.label(),
            e.pos.line,
            e.pos.col,
            e.message
        )
    })?;
    let mut at = yaml::Positions::of(&value);
    // Where scene `i` is in the output, as `Positions` names paths.
    let (list, prefix) = match value.kind {
        Kind::Seq(list) => (list, ""),
        Kind::Map(mut entries) if entries.len() == 1 && entries[0].0.as_str() == Some("scenes") => {
            match entries.pop().map(|(_, v)| v.kind) {
                Some(Kind::Seq(list)) => (list, "scenes"),
                _ => return Err(shape_error(g)),
            }
        }
        _ => return Err(shape_error(g)),
    };
    let mut cx = Ctx::new(g.label(), &m.dir);
    // Generated scenes may name the manifest's lanes.
    cx.lane_devices = m
        .lanes
        .iter()
        .map(|(name, l)| (name.clone(), Some(l.devices)))
        .collect();
    // And its workers.
    cx.worker_names = m.workers.keys().cloned().collect();
    // Its scenes belong to the generator's selection.
    cx.selections_declared = m.selections.clone();
    cx.current_selection = g.selection.clone();
    let mut scenes = Vec::new();
    let mut lines: Vec<usize> = Vec::new();
    for (i, v) in list.into_iter().enumerate() {
        let path = format!("{prefix}[{i}]");
        let line = v.pos().line;
        if let Some(s) = cx.scene(v, &path, &m.platform, &m.env, &m.toolchains) {
            scenes.push(s);
            lines.push(line);
        }
    }
    m.notes.append(&mut cx.notes);
    if !cx.diags.is_empty() {
        let mut diags = std::mem::take(&mut cx.diags);
        for d in &mut diags {
            if let Some(pos) = at.find(&d.path) {
                d.line = Some(pos.line);
                d.col = Some(pos.col);
            }
        }
        diags.sort_by_key(|d| (d.line.unwrap_or(usize::MAX), d.col.unwrap_or(0)));
        let mut msg = format!(
            "{} printed {} invalid scene field{}:",
            g.label(),
            diags.len(),
            if diags.len() == 1 { "" } else { "s" }
        );
        let total = diags.len();
        for d in diags.into_iter().take(crate::base::error::MAX_SHOWN) {
            let path = if prefix.is_empty() {
                format!("scenes{}", d.path)
            } else {
                d.path
            };
            let said = format!("{path}: {}", d.message);
            let said = crate::base::error::clip(&said, crate::base::error::MAX_MESSAGE);
            match d.line {
                Some(l) => write!(msg, "\n  output line {l}: {said}"),
                None => write!(msg, "\n  {said}"),
            }
            .expect("write to a string");
        }
        if total > crate::base::error::MAX_SHOWN {
            write!(
                msg,
                "\n  … and {} more",
                total - crate::base::error::MAX_SHOWN
            )
            .expect("a string");
        }
        return Err(crate::base::error::err!(Usage, "{msg}"));
    }
    Ok((scenes, lines))
}

fn shape_error(g: &Generator) -> anyhow::Error {
    crate::base::error::err!(
        Usage,
        "{} must print a list of scenes, or a mapping with only `scenes:`",
        g.label()
    )
}
