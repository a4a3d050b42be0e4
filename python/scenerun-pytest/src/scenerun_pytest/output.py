"""Where a lane process's own output stands. Its log is the one regular file its stdout
and stderr both were when pytest started (before capture); a scene's share of that log
ends at the file's size when the scene's ``end`` record is written, the process's
streams flushed first, so scenerun shows under a failure what the scene wrote and
nothing the next one did (docs/lanes.md, ``output_bytes``). Output that is no regular
file, or two files, has no size to give: the record says nothing then."""

from __future__ import annotations

import os
import stat
import sys
from typing import Callable

import pytest

_LOG = pytest.StashKey[int]()


def keep(config: pytest.Config) -> None:
    """Called before capture starts: keep a duplicate of the log, when there is one."""
    try:
        out, err = os.fstat(1), os.fstat(2)
        if stat.S_ISREG(out.st_mode) and (out.st_dev, out.st_ino) == (err.st_dev, err.st_ino):
            config.stash[_LOG] = os.dup(1)
    except OSError:
        pass


def mark(config: pytest.Config) -> Callable[[], int | None] | None:
    """What flushes the process's streams and gives the log's size then; None without a
    log."""
    fd = config.stash.get(_LOG, None)
    if fd is None:
        return None

    def at() -> int | None:
        try:
            writer = config.get_terminal_writer()  # pytest's own, onto the real stdout
        except AssertionError:
            writer = None  # -p no:terminal
        for stream in (writer, sys.__stdout__, sys.__stderr__):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):
                pass  # closed, or a pipe gone: nothing more of it reaches the log
        try:
            return os.fstat(fd).st_size
        except OSError:
            return None

    return at
