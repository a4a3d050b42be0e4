"""What a process that forks children needs, shared by the warm worker (``worker``) and
the lanes' fork server (``fork``): how many threads it has (a fork copies only the
calling one), and the exit status a ``SystemExit`` stands for. Standard library only:
the process standing for a forked lane imports it too."""

from __future__ import annotations

import os
import sys
import threading


def thread_count() -> int:
    """This process's threads, as the kernel counts them."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def exit_code(e: SystemExit) -> int:
    """The status ``sys.exit(x)`` ends a process with: 0 for None, the number, or 1 for
    anything else (which is printed, as the interpreter prints it)."""
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1
