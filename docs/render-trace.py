#!/usr/bin/env python3
"""Render a scenerun trace.json (Chrome trace events) to a PNG timeline.

    python3 docs/render-trace.py build/scenerun/trace.json trace.png   # needs matplotlib

One row per track (warm slots, the lock, each device id), one bar per span. For a
zoomable view, open trace.json in https://ui.perfetto.dev instead.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"kernel": "#4e79a7", "fixture": "#f28e2b", "golden": "#e15759",
          "scene": "#59a14f", "lock": "#bab0ac", "lane": "#b07aa1"}


def main(src, dst):
    events = json.load(open(src))["traceEvents"]
    names = {}
    for e in events:
        if e["ph"] == "M" and e["name"] == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
        if e["ph"] == "M" and e["name"] == "process_name":
            names[(e["pid"], None)] = e["args"]["name"]
    spans = [e for e in events if e["ph"] == "X"]
    t0 = min(e["ts"] for e in spans)
    rows = sorted({(e["pid"], e["tid"]) for e in spans})
    total = (max(e["ts"] + e["dur"] for e in spans) - t0) / 1e6
    fig, ax = plt.subplots(figsize=(12, 0.55 * len(rows) + 1.2))
    for y, row in enumerate(rows):
        for e in (e for e in spans if (e["pid"], e["tid"]) == row):
            x, w = (e["ts"] - t0) / 1e6, e["dur"] / 1e6
            color = COLORS.get(e.get("cat"), "#999999")
            if e.get("args", {}).get("outcome") in ("failed", "timed_out"):
                color = "#d62728"
            ax.barh(y, w, left=x, height=0.7, color=color, edgecolor="white", linewidth=0.5)
            label = e["name"].split(" ", 1)[-1]
            if w > 0.0033 * len(label) * total:
                ax.text(x + w / 2, y, label, ha="center", va="center", fontsize=6.5, clip_on=True)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f'{names.get((p, None), p)}: {names.get((p, t), t)}'.replace("scenerun ", "")
                        for p, t in rows], fontsize=8)
    ax.invert_yaxis()
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=c, label=k) for k, c in COLORS.items()],
              loc="upper left", fontsize=7, ncol=6, frameon=False, bbox_to_anchor=(0, -0.18))
    ax.set_xlabel("seconds")
    ax.set_title("scenerun trace.json: warm slots, lock, device ids")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
