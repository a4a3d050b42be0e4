"""Which installed distribution carries this package.

``scenerun_pytest`` ships in two distributions: the ``scenerun`` wheel (the binary and
this plugin, built with maturin) and ``scenerun-pytest`` (the plugin alone, for a
scenerun installed with cargo). Both write the same files, so with both in one
environment, uninstalling either one deletes the plugin under the other. That state is
refused, never used silently: the ``scenerun`` wheel is the one to keep.
"""

from __future__ import annotations

import os

WHEEL = "scenerun"
PLUGIN_ONLY = "scenerun-pytest"


def _installed_beside() -> dict[str, str]:
    """{distribution: version} of the two, from the dist-info directories beside this
    package (one directory listing: this runs in every fixture, golden and lane process).
    Empty when the package is not installed there (an editable install, a source tree)."""
    site = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found: dict[str, str] = {}
    try:
        entries = os.listdir(site)
    except OSError:
        return found
    for entry in entries:
        if not entry.endswith(".dist-info"):
            continue
        name, _, version = entry[: -len(".dist-info")].partition("-")
        name = name.lower().replace("_", "-").replace(".", "-")
        if name in (WHEEL, PLUGIN_ONLY):
            found[name] = version
    return found


def conflict() -> str | None:
    """A message naming both distributions when both are installed, else None."""
    versions = _installed_beside()
    if len(versions) < 2:
        return None
    return (
        f"scenerun_pytest is installed twice in this environment: by `{WHEEL}` "
        f"{versions[WHEEL]} (the scenerun binary and this plugin) and by `{PLUGIN_ONLY}` "
        f"{versions[PLUGIN_ONLY]} (the plugin alone). Keep the `{WHEEL}` wheel: "
        f"pip uninstall -y {PLUGIN_ONLY} && pip install --force-reinstall --no-deps {WHEEL}"
    )
