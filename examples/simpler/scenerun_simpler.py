"""scenerun's mapping of hw-native-sys/simpler's tests onto lanes (docs/adopting.md).

Copied to simpler's repository root. `scenerun_pytest collect` and the lanes load it
(`-p scenerun_simpler` in the manifest), so plain pytest runs never see it. Each test
goes to the lane that runs it the way simpler's own dispatcher does: L2 classes share
one process per runtime, L3 classes and the standalone device functions get processes of
their own kind per runtime and device count. SDMA tests run after everything else.

Inside a lane, what a DFX run writes (deps.json, swimlane records, PMU counters, args
dumps: simpler puts them under `<root>/outputs/<case>_<time>/`) goes to the directory
scenerun gives the running scene (`SCENERUN_SCENE_OUTPUTS`), so two scenes running at
once never share one and report.json names each scene's files.
"""

import importlib
import os
from pathlib import Path

import pytest

SCENE_OUTPUTS = "SCENERUN_SCENE_OUTPUTS"


def _marker_arg(item, name):
    marker = item.get_closest_marker(name)
    return marker.args[0] if marker is not None and marker.args else None


@pytest.hookimpl(optionalhook=True)
def pytest_scenerun_scene(item, case):
    cls = item.cls
    level = getattr(cls, "_st_level", None) or getattr(getattr(item, "function", None), "_st_level", None)
    runtime = getattr(cls, "_st_runtime", None) or _marker_arg(item, "runtime") or "tensormap_and_ringbuffer"
    devices = int(case.get("config", {}).get("device_count") or _marker_arg(item, "device_count") or 1)
    if level is not None and int(level) == 2:
        lane = f"l2_{runtime}"
    elif level is not None and int(level) == 3:
        lane = f"l3_{runtime}_x{devices}"
    else:
        lane = f"fn_{runtime}_x{devices}"
    over = {"lane": lane, "devices": devices}
    if item.get_closest_marker("sdma"):
        over["order"] = "last"
    return over


def pytest_configure(config):
    """simpler's per-case output root, redirected to the running scene's directory."""
    try:  # the module: the package exports a decorator of the same name
        scene_test = importlib.import_module("simpler_setup.scene_test")
    except ImportError:
        return
    original = scene_test._outputs_dir
    if getattr(original, "scenerun", False):
        return

    def outputs_dir() -> Path:
        scene_dir = os.environ.get(SCENE_OUTPUTS)
        return Path(scene_dir) if scene_dir else original()

    outputs_dir.scenerun = True
    scene_test._outputs_dir = outputs_dir
