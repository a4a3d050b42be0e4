"""What the one server (``server``) and the processes that ask it for a child (``fork``
for a lane; scenerun itself, in Rust, for a warm step) share: the framing and the types of their messages (``schemas/server_*.schema.json``,
generated from scenerun's types, describe them; tests/test_typeddicts_match_schemas.py
holds these TypedDicts to those files), the state a child must take to be the process it
stands for, and what an interpreter reads only when it starts (``START_ONLY_NAMES``,
``START_ONLY_PREFIXES``: the request schema's ``x-start-only-env``, checked by the same
test). Standard library only: the process standing for a forked lane imports it before
anything else."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
import threading
from typing import Any, Dict, List, Mapping, Optional, TypedDict

Message = Dict[str, Any]


class _ReadyKeys(TypedDict):
    ready: bool
    pid: int


class Ready(_ReadyKeys, total=False):
    """The server's one ready line (``server_ready``)."""

    threads: int
    modules: int


class Interpreter(TypedDict):
    """What an interpreter reads when it starts (``server_request``'s ``interpreter``)."""

    executable: str
    flags: Dict[str, int]
    xoptions: Dict[str, str]
    warnoptions: List[str]


class ProcessState(TypedDict):
    """What a command line set before ``python`` (``server_request``'s ``process``)."""

    umask: int
    rlimits: Dict[str, List[int]]
    nice: int
    affinity: List[int]


class _RequestKeys(TypedDict):
    module: str
    args: List[str]
    cwd: str
    env: Dict[str, str]


class Request(_RequestKeys, total=False):
    """A request for a child (``server_request``): scenerun's for a warm step (no
    ``pgid``, ``interpreter``, ``process``: the server's own), a lane process's with
    all of them."""

    pgid: int
    interpreter: Interpreter
    process: ProcessState


class Started(TypedDict):
    """``server_started``: the child's pid; it waits for the asker's byte ``1``."""

    pid: int


class Refused(TypedDict):
    """``server_refused``: no child, and why."""

    error: str


class Ended(TypedDict):
    """``server_ended``: the child's wait status."""

    status: int

#: Where a process finds the server's socket.
ENV = "SCENERUN_FORK_SERVER"

#: Signals a lane's group may get (a stop signal, the cancel, a dump request): the child
#: acts on them, the process standing for it does not.
RELAYED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)

#: Variables an interpreter, or a library the server preloaded, reads only when it starts:
#: these names and every name with one of the prefixes. A child cannot take another value.
START_ONLY_NAMES = frozenset(
    {
        "VIRTUAL_ENV",
        "HOME",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "MALLOC_ARENA_MAX",
        "GLIBC_TUNABLES",
        "TZ",
    }
)
START_ONLY_PREFIXES = ("PYTHON", "LD_")


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


def children(pid: int) -> list[int]:
    """The children of ``pid`` alive now (from ``/proc/PID/task/*/children``)."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/children") as f:
                out.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


# ---------------------------------------------------------------------------- framing


def send_message(sock: socket.socket, obj: Mapping[str, Any], fds: Optional[list[int]] = None) -> None:
    """One message: a 4-byte big-endian length, then that much JSON (descriptors, if
    any, ride on its first byte)."""
    data = json.dumps(obj).encode()
    msg = struct.pack("!I", len(data)) + data
    if fds:
        socket.send_fds(sock, [msg], fds)
    else:
        sock.sendall(msg)


def recv_message(sock: socket.socket, with_fds: bool = False) -> tuple[Optional[Message], list[int]]:
    """One message and the descriptors that came with it; None at end of stream."""
    fds: list[int] = []
    buf = b""
    if with_fds:
        buf, fds, _, _ = socket.recv_fds(sock, 1 << 16, 3)
        if not buf:
            return None, fds
    while len(buf) < 4 or len(buf) < 4 + struct.unpack("!I", buf[:4])[0]:
        more = sock.recv(1 << 16)
        if not more:
            return None, fds
        buf += more
    n = struct.unpack("!I", buf[:4])[0]
    msg = json.loads(buf[4 : 4 + n])
    if not isinstance(msg, dict):
        raise ValueError("a message that is not a JSON object")
    return msg, fds


def same_user(sock: socket.socket) -> bool:
    """Whether the process at the other end of ``sock`` runs as this user (a server or a
    lane of someone else's is never talked to)."""
    cred = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", cred)
    return bool(uid == os.geteuid())


# ----------------------------------------------------------------- what a child must be

def start_only() -> tuple[frozenset[str], tuple[str, ...]]:
    """(names, prefixes) of the variables an interpreter or a preloaded library reads only
    when it starts: a child forked from a server cannot take another value of them."""
    return START_ONLY_NAMES, START_ONLY_PREFIXES


def start_only_differences(theirs: Message, mine: Message) -> list[str]:
    names, prefixes = start_only()
    keys = set(theirs) | set(mine)
    return sorted(k for k in keys if (k in names or k.startswith(prefixes)) and theirs.get(k) != mine.get(k))


def interpreter_state() -> Interpreter:
    """What this interpreter was started with that a fork cannot change."""
    flags = {k: getattr(sys.flags, k) for k in dir(sys.flags) if not k.startswith(("_", "n_")) and
             isinstance(getattr(sys.flags, k), (int, bool))}
    return {
        "executable": sys.executable,
        "flags": flags,
        "xoptions": {str(k): str(v) for k, v in sys._xoptions.items()},
        "warnoptions": list(sys.warnoptions),
    }


def _limits() -> dict[str, list[int]]:
    import resource

    out = {}
    for name in sorted(n for n in dir(resource) if n.startswith("RLIMIT_")):
        try:
            out[name] = list(resource.getrlimit(getattr(resource, name)))
        except (ValueError, OSError):
            pass
    return out


def process_state() -> ProcessState:
    """What a process inherits from the command line that started it and a fork would
    not: umask, resource limits (``ulimit``), niceness (``nice``), CPU affinity
    (``taskset``)."""
    mask = os.umask(0)
    os.umask(mask)
    return {
        "umask": mask,
        "rlimits": _limits(),
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "affinity": sorted(os.sched_getaffinity(0)),
    }


def unsettable(state: Message) -> Optional[str]:
    """Why this process could not take ``state`` (None: it can). Unprivileged, a limit's
    hard value and the niceness only go one way."""
    import resource

    root = os.geteuid() == 0
    inf = resource.RLIM_INFINITY
    mine = _limits()
    for name, (soft, hard) in (state.get("rlimits") or {}).items():
        if name not in mine:
            return f"the lane's {name} is unknown here"
        cur_hard = mine[name][1]
        bigger = (cur_hard != inf) and (hard == inf or hard > cur_hard)
        if bigger and not root:
            return f"the lane's hard {name} ({hard}) is above the server's ({cur_hard})"
    nice = state.get("nice")
    if nice is not None and nice < os.getpriority(os.PRIO_PROCESS, 0) and not root:
        return f"the lane's niceness ({nice}) is below the server's"
    return None


def apply_process_state(state: Optional[Message]) -> None:
    """Take ``state`` (``process_state`` of the process asking), in the child."""
    if not state:
        return
    import resource

    os.umask(int(state["umask"]))
    for name, (soft, hard) in (state.get("rlimits") or {}).items():
        resource.setrlimit(getattr(resource, name), (soft, hard))
    nice = state.get("nice")
    if nice is not None:
        now = os.getpriority(os.PRIO_PROCESS, 0)
        if nice != now:
            os.setpriority(os.PRIO_PROCESS, 0, int(nice))
    if state.get("affinity"):
        os.sched_setaffinity(0, set(state["affinity"]))
