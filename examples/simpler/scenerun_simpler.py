"""scenerun's mapping of hw-native-sys/simpler's tests onto lanes (docs/adopting.md).

Copied to simpler's repository root; only `scenerun_pytest collect` loads it (`-p
scenerun_simpler` in scenes.yaml), so plain pytest runs never see it. Each test goes to
the lane that runs it the way simpler's own dispatcher does: L2 classes share one
process per runtime, L3 classes and the standalone device functions get processes of
their own kind per runtime and device count. SDMA tests run after everything else.
"""

import pytest


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
