"""Stack dumps that survive pytest's output capture.

scenerun sends a lane or device step its ``stop_signal`` (``SCENERUN_STOP_SIGNAL``, e.g.
``USR1``) before it kills it on a timeout or a cancel, so that the suite's own handler
(simpler: ``faulthandler.register(SIGUSR1)``) dumps every thread's stack. Under pytest's
default capture that dump goes into the capture's temporary file and dies with the
process. Invariant: inside scenerun, the stop signal's dump is written to the stream
the process was started with (the scene's log), whichever capture is active.
"""

from __future__ import annotations

import faulthandler
import os
import signal
from typing import IO, Any

import pytest

_ORIGINAL_STDERR = pytest.StashKey[int]()
_DUMP_FILE = pytest.StashKey[IO[Any]]()


def keep_original_stderr(config: pytest.Config) -> None:
    """Called before capture starts: keep a duplicate of the process's real stderr."""
    try:
        config.stash[_ORIGINAL_STDERR] = os.dup(2)
    except OSError:
        pass


def signal_of(text: str | None) -> signal.Signals | None:
    if not text:
        return None
    name = text.strip().upper()
    if name.isdigit():
        try:
            return signal.Signals(int(name))
        except ValueError:
            return None
    name = name if name.startswith("SIG") else "SIG" + name
    return getattr(signal.Signals, name, None)


def route_stop_signal(config: pytest.Config, signal_text: str | None) -> bool:
    """Register the stop signal's dump onto the original stderr (after the suite's own
    registration, which this replaces for that signal only). False when nothing to do."""
    sig = signal_of(signal_text)
    fd = config.stash.get(_ORIGINAL_STDERR, None)
    if sig is None or fd is None or sig in (signal.SIGKILL, signal.SIGSTOP):
        return False
    stream = os.fdopen(fd, "w", closefd=False)
    config.stash[_DUMP_FILE] = stream  # faulthandler needs the file kept open
    faulthandler.register(sig, file=stream, all_threads=True, chain=False)
    return True
