"""Hooks a ``conftest.py`` may implement (registered by the plugin; see docs/pytest.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import pytest


@pytest.hookspec(firstresult=True)
def pytest_scenerun_scene(item: pytest.Item, case: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """Overrides for the scene of one case of a scene class, or None for the default.

    ``item`` is the class's collected test node, ``case`` the entry of its ``CASES``.
    Return a dict with any of: ``lane`` (str), ``devices`` (int), ``tags`` (list, added to
    the default tags), ``order`` (``first``/``any``/``last``, written as
    ``device.order``), ``persist`` (False: the fixture is job-scoped, for huge ones),
    ``skip`` (true or a reason: no scene for this case).
    """


@pytest.hookspec(firstresult=True)
def pytest_scenerun_restart(item: pytest.Item, excinfo: pytest.ExceptionInfo[BaseException]) -> str | bool | None:
    """Inside a scenerun lane: a reason (a string, or True) when this failure of ``item``
    left the device runtime poisoned, so that a fresh process on the same card runs the
    rest of the batch; None otherwise (see :mod:`scenerun_pytest.restart`)."""


@pytest.hookspec(firstresult=True)
def pytest_scenerun_save(obj: Any, path: str) -> bool | None:
    """Write ``obj`` (what ``generate_args`` or ``compute_golden`` produced) into the
    existing directory ``path`` and return True, or return None for the built-in codec."""


@pytest.hookspec(firstresult=True)
def pytest_scenerun_load(path: str) -> Any:
    """Return the object a ``pytest_scenerun_save`` hook wrote into ``path``."""
