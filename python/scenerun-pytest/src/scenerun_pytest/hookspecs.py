"""Hooks a ``conftest.py`` may implement (registered by the plugin; see docs/pytest.md)."""

import pytest


@pytest.hookspec(firstresult=True)
def pytest_scenerun_scene(item, case):
    """Overrides for the scene of one case of a scene class, or None for the default.

    ``item`` is the class's collected test node, ``case`` the entry of its ``CASES``.
    Return a dict with any of: ``lane`` (str), ``devices`` (int), ``tags`` (list, added to
    the default tags), ``order`` (``first``/``any``/``last``, written as
    ``device.order``), ``persist`` (False: the fixture is job-scoped, for huge ones),
    ``skip`` (true or a reason: no scene for this case).
    """


@pytest.hookspec(firstresult=True)
def pytest_scenerun_restart(item, excinfo):
    """Inside a scenerun lane: a reason (a string, or True) when this failure of ``item``
    left the device runtime poisoned, so that a fresh process on the same card runs the
    rest of the batch; None otherwise (see :mod:`scenerun_pytest.restart`)."""


@pytest.hookspec(firstresult=True)
def pytest_scenerun_save(obj, path):
    """Write ``obj`` (what ``generate_args`` or ``compute_golden`` produced) into the
    existing directory ``path`` and return True, or return None for the built-in codec."""


@pytest.hookspec(firstresult=True)
def pytest_scenerun_load(path):
    """Return the object a ``pytest_scenerun_save`` hook wrote into ``path``."""
