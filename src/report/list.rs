//! `scenerun list`: the selected scenes with tags, platform, device ids and lane, as text
//! (one scene a line) or versioned JSON. Lists the manifest; computes no key.

use serde_json::json;

use crate::base::ui::Format;
use crate::manifest::Scene;

pub fn render(scenes: &[&Scene], format: Format) -> String {
    match format {
        Format::Text => {
            let w = scenes.iter().map(|s| s.name.len()).max().unwrap_or(0);
            let mut out = String::new();
            for s in scenes {
                let devices = s
                    .device
                    .as_ref()
                    .map(|d| {
                        format!(
                            "{} device{}",
                            d.devices,
                            if d.devices == 1 { "" } else { "s" }
                        )
                    })
                    .unwrap_or_else(|| "no device step".into());
                let lane = lane_of(s)
                    .map(|l| format!("  lane {l}"))
                    .unwrap_or_default();
                let tags = if s.tags.is_empty() {
                    String::new()
                } else {
                    format!("  [{}]", s.tags.join(", "))
                };
                out.push_str(&format!(
                    "{:<w$}  {}  {devices}{lane}{tags}\n",
                    s.name, s.platform
                ));
            }
            out
        }
        Format::Json => {
            let list: Vec<_> = scenes
                .iter()
                .map(|s| {
                    let mut row = json!({
                        "name": s.name,
                        "nodeid": s.nodeid,
                        "case": s.case,
                        "platform": s.platform,
                        "tags": s.tags,
                        "devices": s.device.as_ref().map(|d| d.devices),
                        "exclusive": s.device.as_ref().is_some_and(|d| d.exclusive),
                        "lane": lane_of(s),
                        "kernels": s.kernels.len(),
                        "fixture": s.fixture.is_some(),
                        "golden": s.golden.is_some(),
                    });
                    // Only with `selections:`: a manifest without them lists what it did.
                    if let Some(sel) = &s.selection {
                        row["selection"] = json!(sel);
                    }
                    row
                })
                .collect();
            format!(
                "{}\n",
                serde_json::to_string_pretty(&json!({"version": 1, "scenes": list})).expect("json")
            )
        }
    }
}

/// The lane a scene's device step runs in, if it runs in one.
fn lane_of(s: &Scene) -> Option<&str> {
    s.device.as_ref().and_then(|d| d.run.lane())
}
