"""``python -m scenerun_pytest collect PATHS...``: pytest collection only (no fixture,
golden or device work) -> the scenes for scenerun's ``scenes_from:``, one per class x
case, as JSON on stdout."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import sys

import pytest

from . import SceneTest


class CollectError(Exception):
    pass


class _Items:
    def __init__(self):
        self.items = []

    def pytest_collection_modifyitems(self, items):
        self.items = list(items)


def collect_items(paths, extra_args=()):
    grab = _Items()
    args = ["--collect-only", "-qq", "-p", "no:cacheprovider", "-W", "ignore::pytest.PytestAssertRewriteWarning"]
    args += [*extra_args, *paths]
    # pytest's own report goes to stderr: stdout carries the scenes only.
    with contextlib.redirect_stdout(sys.stderr):
        code = pytest.main(args, plugins=[grab])
    if code not in (0, 5):
        raise CollectError(f"pytest collection failed (exit {int(code)}); see its report above")
    return grab.items


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:128] or "_"


def _rel(path: str) -> str:
    return os.path.relpath(os.path.normpath(path), os.getcwd()).replace(os.sep, "/")


def _words(*parts: str) -> str:
    """A shell command for a scenerun template: literal braces doubled."""
    return " ".join(parts).replace("{", "{{").replace("}", "}}")


def lane_name(base: str, devices: int, overrides) -> str:
    if devices in overrides:
        return overrides[devices]
    return base if devices == 1 else f"{base}_x{devices}"


def scenes_of(items, opts):
    py = opts.python
    rows = []
    for item in items:
        cls = getattr(item, "cls", None)
        spec = getattr(item, "callspec", None)
        if cls is None or not issubclass(cls, SceneTest) or spec is None:
            continue
        case = spec.params.get("scene_case")
        if not isinstance(case, dict):
            continue
        platforms = case.get("platforms")
        if opts.platform and platforms and opts.platform not in platforms:
            continue
        path = _rel(str(item.path))
        test_id = path + "::" + item.nodeid.split("::", 1)[1]
        rows.append((item, cls, case, path, test_id))

    # Short names (Class.case) unless two classes share a name; then path-qualified.
    short = [f"{cls.__name__}.{case['name']}" for _, cls, case, _, _ in rows]
    dup = {n for n in short if short.count(n) > 1}
    scenes = []
    for (item, cls, case, path, test_id), name in zip(rows, short):
        if name in dup:
            name = path[:-3].replace("/", ".") + "." + name if path.endswith(".py") else path + "." + name
        cls_dir = os.path.dirname(str(item.path))
        class_id = f"{path}::{cls.__name__}"
        kernels = [
            {
                "name": k.name,
                "toolchain": k.toolchain or cls.TOOLCHAIN,
                "source": _rel(os.path.join(cls_dir, k.source)),
                "include_dirs": [_rel(os.path.join(cls_dir, d)) for d in k.include_dirs],
                "flags": list(k.flags),
            }
            for k in cls.KERNELS
        ]
        q = shlex.quote
        phase = [py, "-m", "scenerun_pytest"]
        fixture = {
            "run": _words(*phase, "fixture", q(class_id), "--case", q(case["name"]))
            + " --out {out} --depfile {depfile}",
            "inputs": [path],
        }
        golden = {
            "run": _words(*phase, "golden", q(class_id), "--case", q(case["name"]))
            + " --fixture {fixture} --out {out} --depfile {depfile}",
            "inputs": [path],
        }
        if opts.identity:
            fixture["identity"] = golden["identity"] = opts.identity
        devices = int(case.get("devices", 1))
        if opts.device_mode == "lane":
            device = {"lane": lane_name(opts.lane, devices, opts.lanes), "args": [test_id], "devices": devices}
        else:
            device = {
                "run": _words(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", q(test_id)),
                "devices": devices,
            }
        scene = {"name": _safe(name), "tags": ["pytest", *cls.TAGS, *case.get("tags", ())]}
        if kernels:
            scene["kernels"] = kernels
        scene.update({"fixture": fixture, "golden": golden, "device": device})
        scenes.append(scene)
    return scenes


def main(opts) -> int:
    try:
        items = collect_items(opts.paths)
        scenes = scenes_of(items, opts)
    except CollectError as e:
        print(f"scenerun_pytest collect: {e}", file=sys.stderr)
        return 1
    json.dump({"scenes": scenes}, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0
