"""A lane process started before the lock (scenerun's docs/lanes.md, "Lanes started before
the lock").

``scenerun device`` starts the first processes of a ``prestart: true`` lane before it asks
for the lock, so that Python, pytest, the suite's imports and collection are paid while
the job waits in the queue. The device ids are not known then: ``{devices}`` and
``SCENERUN_DEVICES`` hold the sentinel ``__scenerun_devices__``, and ``SCENERUN_GO`` names
the file the ids come in, one JSON line ``{"devices": "3,4"}`` that appears whole.

Once collection has finished and before any test runs (so before any session fixture: a
device runtime's init), the plugin writes ``{"event": "ready", "unix_secs": T}`` to the
results file, waits for the go file, and then puts the ids where the sentinel was:
``SCENERUN_DEVICES``, every ``config.option`` value (a string, or a list or tuple of
strings) and ``sys.argv``. A suite that reads the ids before that (at import, in
``pytest_configure``, in ``pytest_sessionstart``) or converts its device option to a
number when it is parsed cannot start before the lock.
"""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from .lane import ResultsFile

SENTINEL = "__scenerun_devices__"
# How often the go file is looked for: the ids reach the process at most this late.
POLL_SECS = 0.01


def _swap(value: object, devices: str) -> object:
    if isinstance(value, str):
        return value.replace(SENTINEL, devices)
    if isinstance(value, (list, tuple)) and any(isinstance(v, str) and SENTINEL in v for v in value):
        return type(value)(v.replace(SENTINEL, devices) if isinstance(v, str) else v for v in value)
    return value


def ready(results: str | None) -> None:
    """Say ready: one line, one write (a crash never leaves half of it)."""
    ResultsFile(results).write({"event": "ready", "unix_secs": time.time()})


def wait_for_ids(config: pytest.Config) -> str | None:
    """Under ``SCENERUN_GO``: say ready, wait for the ids, put them where the sentinel was.
    Returns the ids (a comma list), or None when the process was not started before the
    lock."""
    go = os.environ.get("SCENERUN_GO")
    if not go:
        return None
    ready(os.environ.get("SCENERUN_RESULTS"))
    while not os.path.exists(go):
        time.sleep(POLL_SECS)
    with open(go) as f:
        devices = str(json.loads(f.readline())["devices"])
    os.environ["SCENERUN_DEVICES"] = devices
    for name, value in list(vars(config.option).items()):
        swapped = _swap(value, devices)
        if swapped is not value:
            setattr(config.option, name, swapped)
    config.args[:] = [a.replace(SENTINEL, devices) for a in config.args]
    sys.argv[:] = [a.replace(SENTINEL, devices) for a in sys.argv]
    return devices
