"""The scene-class protocol, duck-typed: any class pytest collects that has a list of
``CASES`` (dicts with a ``name``), ``generate_args(params)`` and
``compute_golden(args, params)`` is a scene class. No base class is needed; scenerun's
own :class:`~scenerun_pytest.SceneTest` is one too.

The attribute names can be changed in ``[tool.scenerun]`` of ``pyproject.toml``
(``cases``, ``generate``, ``golden``, and ``runner``: the test that runs a class's cases,
``test_run`` by default) or the pytest ini (``scenerun_cases``, ``scenerun_generate``,
``scenerun_golden``, ``scenerun_runner``; the ini wins). ``[tool.scenerun] exclude`` (a
table of node id or prefix to reason) names the nodes a project keeps out of scenerun.

Case fields read (all optional but ``name``): ``params`` (passed to both functions),
``platforms`` (the case runs only on these), ``manual`` (true, a platform or a list of
platforms: the case runs only with ``--manual include|only``), ``devices`` or
``config.device_count`` (ids the case holds), ``tags``, ``skip_golden`` (no golden; the
class attribute ``SKIP_GOLDEN`` is its default).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

import pytest

#: What the suite's files say a case is: a mapping with a ``name`` (any other fields).
Case = Mapping[str, Any]

DEFAULTS: Mapping[str, str] = MappingProxyType(
    {
        "cases": "CASES",
        "generate": "generate_args",
        "golden": "compute_golden",
        "runner": "test_run",
    }
)
MANUAL_MODES: tuple[str, ...] = ("exclude", "include", "only")


@dataclass(frozen=True)
class Names:
    cases: str = DEFAULTS["cases"]
    generate: str = DEFAULTS["generate"]
    golden: str = DEFAULTS["golden"]
    #: The class's test that runs its cases one after the other (upstream: ``test_run``).
    runner: str = DEFAULTS["runner"]


def scenerun_table(path: str) -> dict[str, Any] | None:
    """``[tool.scenerun]`` of the ``pyproject.toml`` at ``path`` (empty when it has none);
    None when this interpreter has no TOML reader (Python < 3.11 without ``tomli``)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - older interpreters
        try:
            import tomli as tomllib
        except ImportError:
            return None
    with open(path, "rb") as f:
        table: dict[str, Any] = tomllib.load(f).get("tool", {}).get("scenerun", {})
    return table


def _pyproject(rootpath: str | os.PathLike[str]) -> dict[str, Any]:
    path = os.path.join(str(rootpath), "pyproject.toml")
    if not os.path.isfile(path):
        return {}
    return scenerun_table(path) or {}


def pyproject_table(config: pytest.Config) -> dict[str, Any]:
    """``[tool.scenerun]`` of the suite's ``pyproject.toml`` (empty when absent)."""
    return _pyproject(config.rootpath)


def names(config: pytest.Config) -> Names:
    """The protocol's attribute names for this pytest session."""
    found = dict(DEFAULTS)
    for key, value in _pyproject(config.rootpath).items():
        if key in found and isinstance(value, str) and value:
            found[key] = value
    for key in DEFAULTS:
        value = config.getini(f"scenerun_{key}")
        if value:
            found[key] = value
    return Names(**found)


def excludes(config: pytest.Config) -> dict[str, str]:
    """``[tool.scenerun] exclude``: node id (or a prefix: a file, ``path::Class``) -> reason."""
    table = _pyproject(config.rootpath).get("exclude", {})
    if not isinstance(table, dict):
        return {}
    return {str(k): str(v) for k, v in table.items() if isinstance(v, str) and v.strip()}


def is_scene_class(cls: type | None, n: Names) -> bool:
    if cls is None:
        return False
    cases = getattr(cls, n.cases, None)
    return (
        isinstance(cases, (list, tuple))
        and callable(getattr(cls, n.generate, None))
        and callable(getattr(cls, n.golden, None))
    )


def cases_of(cls: type, n: Names) -> list[Any]:
    """The class's cases as it lists them (not checked: an entry may be no mapping)."""
    return list(getattr(cls, n.cases))


def case_name(case: Case, cls: type, index: int) -> str:
    name = case.get("name") if isinstance(case, Mapping) else None
    if not isinstance(name, str) or not name:
        raise ValueError(f"{cls.__name__}.{'CASES'}[{index}] needs a `name`")
    return name


def params_of(case: Case) -> Any:
    """What the suite passes as ``params``: the case's own dict (not a copy)."""
    params = case.get("params")
    return params if params is not None else {}


def devices_of(case: Case) -> int:
    if "devices" in case:
        return int(case["devices"])
    config = case.get("config")
    if isinstance(config, Mapping) and "device_count" in config:
        return int(config["device_count"])
    return 1


def skips_golden(cls: type, case: Case) -> bool:
    return bool(case.get("skip_golden", getattr(cls, "SKIP_GOLDEN", False)))


def manual_applies(manual: object, platform: str | None) -> bool:
    """Whether a case's ``manual`` value makes it manual on ``platform``."""
    if isinstance(manual, str):
        return manual == platform
    if isinstance(manual, (list, tuple, set, frozenset)):
        return platform in manual
    return bool(manual)


def selected(case: Case, platform: str | None, manual_mode: str) -> bool:
    """Whether the suite would run this case: its ``platforms`` include the platform (when
    one is given) and its ``manual`` field agrees with the manual mode."""
    platforms = case.get("platforms")
    if platform and platforms is not None and platform not in platforms:
        return False
    is_manual = manual_applies(case.get("manual"), platform)
    if manual_mode == "include":
        return True
    return is_manual == (manual_mode == "only")


def session_filters(config: pytest.Config) -> tuple[str | None, str]:
    """(platform, manual mode) as the suite's own options give them."""
    platform = config.getoption("platform", None) or None
    mode = config.getoption("manual", None)
    if mode not in MANUAL_MODES:
        mode = "exclude"
    return platform, mode
