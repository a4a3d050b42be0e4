"""The process that asks the one server (``server``, docs/lanes.md "A fork server") for a
child and stands for it.

``python -m scenerun_pytest fork MODULE ARGS...`` is what a lane runs instead of ``python
-m MODULE ARGS...``, with ``$SCENERUN_FORK_SERVER`` naming the server. It sends its stdin, stdout
and stderr, its directory, whole environment, arguments, process group, the interpreter
it is (executable, flags, ``-X``/``-W`` options) and what its command line set before
``python`` (umask, limits, niceness, CPU affinity). The server forks a child that joins
this process's group, takes all of that, and runs ``MODULE`` as ``__main__``; this
process confirms, waits for the server to say how the child ended, and ends the same way
(the same exit status, or the same signal).

Invariant: whatever the server cannot do, the command runs as written. No server, a
server of another user, a refusal (with its reason), or no answer within ``WAIT_SECS``
(a server that said ready and then never serves, or stalls mid-fork): this process
replaces itself with ``python -m MODULE ARGS...`` with its own flags. A child runs only
once this process confirmed it took its pid, so giving up never leaves a twin. Signals
sent to the group reach the child as they would reach the lane itself; this process
ignores them and only relays the ending.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from typing import NoReturn, Optional

from .forks import ENV, RELAYED, Request, interpreter_state, process_state, recv_message, same_user, send_message

#: How long the server has to answer a request (connect, send, its pid or refusal). Past
#: it, the command runs as written.
WAIT_SECS = 5.0


def fork_main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m scenerun_pytest fork MODULE [ARGS...]", file=sys.stderr)
        return 4
    module, args = argv[0], argv[1:]
    ended = through_server(module, args)
    if ended is not None:
        return ended
    as_written(module, args)


def as_written(module: str, args: list[str]) -> NoReturn:
    """``python -m MODULE ARGS`` with this interpreter's own options (``-O``, ``-X``...)."""
    import subprocess

    opts = subprocess._args_from_interpreter_flags()  # type: ignore[attr-defined]
    os.execv(sys.executable, [sys.executable, *opts, "-m", module, *args])


def through_server(module: str, args: list[str]) -> Optional[int]:
    """Run ``module`` in a child of the server named by ``$SCENERUN_FORK_SERVER``; how it
    ended, or None when the server did not run it (say why when it said)."""
    path = os.environ.get(ENV)
    if not path or getattr(sys, "_scenerun_forked", False):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    reply = None
    try:
        sock.settimeout(WAIT_SECS)
        sock.connect(path)
        if not same_user(sock):
            raise OSError(f"{path} is served by another user")
        req: Request = {
            "module": module,
            "args": args,
            "cwd": os.getcwd(),
            "env": dict(os.environ),
            "pgid": os.getpgrp(),
            "interpreter": interpreter_state(),
            "process": process_state(),
        }
        # The group's signals are the child's from the moment it exists.
        for sig in RELAYED:
            signal.signal(sig, signal.SIG_IGN)
        send_message(sock, req, [0, 1, 2])
        reply, _ = recv_message(sock)
        if reply is not None and "pid" in reply:
            sock.sendall(b"1")  # confirmed: from here on the child is the command
    except socket.timeout:
        reply = {"error": f"the fork server did not answer within {WAIT_SECS:.0f}s"}
    except (OSError, ValueError):
        reply = None
    if reply is None or "pid" not in reply:
        sock.close()
        for sig in RELAYED:
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if reply is not None:
            print(f"scenerun_pytest fork: {reply.get('error')}; running it as written", file=sys.stderr)
        return None
    pid = int(reply["pid"])
    sock.settimeout(None)
    try:
        ended, _ = recv_message(sock)
    except (OSError, ValueError):
        ended = None
    if ended is None or "status" not in ended:
        # The server went away first: wait for the child to be gone; its status is lost.
        while _alive(pid):
            time.sleep(0.05)
        print("scenerun_pytest fork: the fork server ended before the lane did", file=sys.stderr)
        return 70
    status = int(ended["status"])
    if os.WIFSIGNALED(status):
        sig = signal.Signals(os.WTERMSIG(status))
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those cannot be caught anyway
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        time.sleep(1)
        return 128 + sig
    return os.waitstatus_to_exitcode(status)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
