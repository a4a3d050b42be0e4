//! `scenerun list` on a manifest whose scenes come from `scenes_from:` lists them as
//! `plan` sees them, and shows each scene's lane, in text and JSON.

use super::*;

/// One literal scene, two generated (one in a lane): `list` shows all three, the lane in
/// text and as `"lane": "npu"` in JSON (null for a scene outside lanes).
#[test]
fn list_shows_generated_scenes_and_their_lanes() {
    let s = Suite::new();
    s.script(
        "gen.sh",
        "#!/bin/sh\necho '[{\"name\": \"gen_lane\", \"device\": {\"lane\": \"npu\", \"args\": [\"t.py::A\"]}}, {\"name\": \"gen_plain\", \"device\": {\"run\": \"true\"}}]'\n",
    );
    s.manifest(
        "version: 1\nlanes:\n  npu:\n    run: \"true {args}\"\n    devices: 1\nscenes_from:\n  - run: ./gen.sh\n    inputs: [gen.sh]\nscenes:\n  - name: literal\n    device: { run: \"true\" }\n",
    );
    let o = s.cmd(&["list"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    let text = stdout(&o);
    assert_eq!(text.lines().count(), 3, "{}", show(&o));
    let lane_line = text
        .lines()
        .find(|l| l.starts_with("gen_lane"))
        .expect("gen_lane listed");
    assert!(lane_line.contains("lane npu"), "{text}");

    let o = s.cmd(&["list", "--format", "json"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    let lane = |name: &str| {
        v["scenes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {v:#}"))["lane"]
            .clone()
    };
    assert_eq!(lane("gen_lane"), "npu", "{v:#}");
    assert!(lane("gen_plain").is_null(), "{v:#}");
    assert!(lane("literal").is_null(), "{v:#}");

    let o = s.cmd(&["list", "-k", "gen_"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(stdout(&o).lines().count(), 2, "{}", show(&o));
}
