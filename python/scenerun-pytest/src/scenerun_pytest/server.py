"""The one pre-imported Python server behind warm workers (``python -m scenerun_pytest
worker``) and the lanes' fork server (``python -m scenerun_pytest zygote``); docs/warm.md
("Workers") and docs/lanes.md ("A fork server"). Its messages are described once, by the
JSON Schemas ``schemas/server_*.schema.json`` generated from scenerun's types (the
TypedDicts in ``forks`` are checked against them).

Invariants:

* **One handshake, one transport, one request, one fork.** The server imports what it
  preloads, then prints one JSON ready line on its stdout. It takes every request on the
  UNIX socket ``$SCENERUN_FORK_SERVER``: from scenerun for a warm step, from ``python -m
  scenerun_pytest fork`` for a lane process, the same message (a module, its arguments,
  directory, whole environment, three descriptors, and for a lane its process group,
  interpreter and process state). Each is answered by the same routine (``_fork``): a
  child forked from the clean, pre-imported state, which takes the request's process
  state and runs the module as ``python -m`` would. Stdin carries no requests; closed,
  it means no new requests, and the server ends once its children have.
* **Nothing of a test file is in the server.** Only modules from outside the project
  (the interpreter's library, site-packages: torch, numpy, pytest) are preloaded; a
  project module, a conftest and a test file are imported by each child itself, as a
  fresh process imports them. So no state another test file set at import time (a
  module global, a seed) reaches a step.
* **A child is the command it stands for, or it is not made.** What an interpreter reads
  only when it starts (its executable, ``sys.flags``, ``-X`` and ``-W`` options, the
  variables ``forks.START_ONLY_NAMES`` and ``START_ONLY_PREFIXES`` list) must equal the
  server's, and what the child must take after the fork (umask, resource limits,
  niceness, CPU affinity, directory, environment) must be settable; otherwise the
  request is refused with the reason, and the step runs as a process, the lane as
  written.
* **No client takes it down.** A request is read with a deadline; a client that sends
  half of one, closes, or vanishes is logged and dropped. A forked child runs only
  once the client has confirmed it took its pid, so a client that gave up (its bounded
  wait is over, it runs the command itself) never has a twin.
* **A step's children die with it.** The server is a child subreaper: what a child that
  stays in the server's group (a warm step) left running is re-parented here and killed
  when it ends, before its end is said.
"""

from __future__ import annotations

import faulthandler
import gc
import json
import os
import selectors
import signal
import socket
import sys
import traceback
from types import MappingProxyType
from typing import Any, Mapping, NoReturn, Sequence

from . import forks
from .forks import Message, exit_code, recv_message, same_user, send_message, thread_count

#: Modules the codec's libraries import on first use (a save, a load): imported once in
#: the server when the library is preloaded. Imports only, no operation.
_LAZY: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "torch": ("torch.utils.serialization", "torch._weights_only_unpickler"),
        "numpy": ("numpy.lib.format",),
    }
)

#: How long a client has to send its whole request.
REQUEST_SECS = 2.0


def preload(modules: Sequence[str], quiet_missing: bool = False) -> int:
    """Import ``modules`` (a failure is said and left to the children); the number now
    loaded."""
    import importlib

    n = 0
    for m in modules:
        try:
            importlib.import_module(m)
            n += 1
        except BaseException as e:  # noqa: BLE001 -- a module that fails here is imported by the child
            if not quiet_missing:
                print(f"scenerun_pytest server: preloading {m} failed: {e!r}", file=sys.stderr)
    for lib, lazy in _LAZY.items():
        if lib in sys.modules:
            for m in lazy:
                try:
                    importlib.import_module(m)
                except BaseException:  # noqa: BLE001 -- another version: the child imports it
                    pass
    return n


def _subreaper() -> bool:
    """Make this process the child subreaper of what it forks (Linux's
    PR_SET_CHILD_SUBREAPER); False where that is not available."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(36, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def refusal(req: Message) -> str | None:
    """Why the child of ``req`` would not be the process it stands for (None: it would).
    Checked in the order ``scenerun plan`` says it: variables, interpreter, process."""
    env = req.get("env") or {}
    differ = forks.start_only_differences(env, dict(os.environ))
    if differ:
        verb = "differs" if len(differ) == 1 else "differ"
        return f"the lane's {', '.join(differ)} {verb} from the server's (read only when an interpreter starts)"
    theirs = req.get("interpreter")
    if theirs is None:
        # Asked by scenerun for the command its server was started as: the same interpreter.
        return forks.unsettable(req.get("process") or {})
    mine: Message = dict(forks.interpreter_state())
    for key, what in (
        ("executable", "interpreter"),
        ("flags", "flags"),
        ("xoptions", "-X options"),
        ("warnoptions", "-W options"),
    ):
        if theirs.get(key) != mine[key]:
            if key == "flags":
                flags = [k for k in mine[key] if (theirs.get(key) or {}).get(k) != mine[key][k]]
                what = "flags (" + ", ".join(f"sys.flags.{k}" for k in flags) + ")"
            verb = "differs" if key == "executable" else "differ"
            return f"the lane's {what} {verb} from the server's (read only when an interpreter starts)"
    return forks.unsettable(req.get("process") or {})


# ---------------------------------------------------------------------------- serving


class Server:
    def __init__(self, proto: int, stdin: int, listener: socket.socket, steps_threads: bool):
        self.proto, self.stdin, self.listener = proto, stdin, listener
        self.steps_threads = steps_threads  # with threads: torch runs on one in a step
        # pid -> the connection of whoever asked, and whether the child stays in our group
        # (a warm step: what it leaves running dies when it ends).
        self.children: dict[int, tuple[socket.socket, bool]] = {}

    def say(self, record: Message) -> None:
        line = (json.dumps(record) + "\n").encode()
        while line:
            line = line[os.write(self.proto, line) :]

    def run(self, ready: Message) -> int:
        sel = selectors.DefaultSelector()
        sel.register(self.stdin, selectors.EVENT_READ, "stdin")
        sel.register(self.listener, selectors.EVENT_READ, "accept")
        self.say(ready)
        open_ = True
        while open_ or self.children:
            for key, _ in sel.select(timeout=0.02 if self.children else 0.5):
                if key.data == "accept":
                    try:
                        conn, _ = self.listener.accept()
                    except OSError:
                        continue
                    self._request(conn)
                elif not os.read(self.stdin, 65536):
                    # scenerun closed our stdin: no new requests; wait for the children.
                    sel.unregister(self.stdin)
                    sel.unregister(self.listener)
                    self.listener.close()
                    open_ = False
            self._reap()
        return 0

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid not in self.children:
                continue  # an orphan re-parented here, killed below
            conn, ours = self.children.pop(pid)
            if ours:
                # What the step left running came here (we are its subreaper): it dies now.
                for orphan in forks.children(os.getpid()):
                    if orphan not in self.children:
                        try:
                            os.kill(orphan, signal.SIGKILL)
                        except OSError:
                            pass
            try:
                send_message(conn, {"status": status})
            except OSError:
                pass  # whoever asked is gone (its group was killed)
            conn.close()

    def _request(self, conn: socket.socket) -> None:
        """One request (the socket): check it, fork its child, tell the asker the pid."""
        fds: list[int] = []
        try:
            if not same_user(conn):
                conn.close()
                return
            conn.settimeout(REQUEST_SECS)  # a client that says nothing holds up no one for long
            req, fds = recv_message(conn, with_fds=True)
            if req is None or len(fds) != 3:
                raise ValueError("an incomplete request")
            why = refusal(req)
            if why:
                send_message(conn, {"error": why})
                raise _Answered()
            pid = self._fork(req, fds, conn)
            if pid is None:
                raise _Answered()
            conn.settimeout(None)
            self.children[pid] = (conn, req.get("pgid") is None)
        except _Answered:
            conn.close()
        except Exception as e:  # noqa: BLE001 -- one client's trouble is never the server's
            print(f"scenerun_pytest server: a request dropped: {e!r}", file=sys.stderr)
            conn.close()
        finally:
            for fd in fds:
                os.close(fd)

    def _fork(self, req: Message, fds: list[int], conn: socket.socket) -> int | None:
        """The one fork-a-child routine. The child takes the request's process state and
        says whether it could; it joins the request's process group when it names one,
        and runs only once the client confirmed. Its pid, or None (the client was told
        why)."""
        sys.stdout.flush()
        sys.stderr.flush()
        threads = thread_count()
        st_r, st_w = os.pipe()
        go_r, go_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(st_r)
            os.close(go_w)
            _child(self, req, fds, conn, threads, st_w, go_r)
        os.close(st_w)
        os.close(go_r)
        said = b""
        while True:
            more = os.read(st_r, 4096)
            if not more:
                break
            said += more
        os.close(st_r)
        error = None if said == b"1" else (said.decode(errors="replace") or "the child ended at once")
        if error is None and req.get("pgid") is not None:
            try:
                os.setpgid(pid, int(req["pgid"]))
            except (OSError, KeyError, ValueError) as e:
                error = f"cannot join process group {req.get('pgid')}: {e}"
        if error is not None:
            os.close(go_w)
            os.waitpid(pid, 0)
            try:
                send_message(conn, {"error": error})
            except OSError:
                pass
            print(f"scenerun_pytest server: not forked: {error}", file=sys.stderr)
            return None
        try:
            send_message(conn, {"pid": pid})
        except OSError:
            pass  # the child finds the client gone and ends
        os.write(go_w, b"1")
        os.close(go_w)
        return pid


class _Answered(Exception):
    """The request was answered (or cannot be): close the connection."""


def _child(server: Server, req: Message, fds: list[int], conn: socket.socket, threads: int,
           st_w: int, go_r: int) -> NoReturn:
    """In the fork: take the request's process state, say so, wait for the go, run the
    module as ``__main__`` and exit with its status. Never returns."""
    import atexit
    import runpy

    code = 1
    try:
        try:
            server.listener.close()
            os.close(server.stdin)
            os.close(server.proto)
            for other, _ in server.children.values():
                other.close()
            forks.apply_process_state(req.get("process"))
            os.chdir(req["cwd"])
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
        except BaseException as e:  # noqa: BLE001 -- said to the server, which refuses
            os.write(st_w, f"the child could not take the lane's state: {e}".encode())
            os._exit(0)
        os.write(st_w, b"1")
        os.close(st_w)
        go = os.read(go_r, 1) == b"1"
        os.close(go_r)
        if not go:
            os._exit(0)
        # The client confirms it took our pid; it may have given up (its wait is bounded).
        conn.settimeout(None)
        if conn.recv(1) != b"1":
            os._exit(0)
        conn.close()
        # As a fresh interpreter has them (the server changed none; this is a guard).
        for sig in forks.RELAYED:
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        sys.stdin = open(0, "r", closefd=False)
        sys.stdout = open(1, "w", closefd=False, buffering=1 if os.isatty(1) else -1)
        sys.stderr = open(2, "w", closefd=False, buffering=1)
        if req.get("pgid") is None:
            # A warm step stopped at its timeout shows where it was.
            faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
            _one_torch_thread_after(threads if server.steps_threads else 1)
        # This package was imported by the server to run it; pytest imports its plugin
        # again (and rewrites its asserts) as in a process of its own.
        for name in [n for n in sys.modules if n == "scenerun_pytest" or n.startswith("scenerun_pytest.")]:
            del sys.modules[name]
        os.environ.clear()
        os.environ.update(req["env"])
        sys.path[0] = req["cwd"]
        sys.argv = [req["module"], *req["args"]]
        # Not through the server again (a lane's own `fork` would ask it).
        setattr(sys, "_scenerun_forked", True)
        try:
            runpy.run_module(req["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            code = exit_code(e)
        except BaseException:
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code & 0xFF)


def _one_torch_thread_after(threads: int) -> None:
    """In a fork of a server that had a thread pool: torch's intra-op pool (OpenMP) may be
    one of the threads the fork lost, and libgomp then hangs in the next parallel region.
    One thread never enters it."""
    torch = sys.modules.get("torch")
    if threads > 1 and torch is not None and hasattr(torch, "set_num_threads"):
        torch.set_num_threads(1)
        print(
            f"scenerun_pytest worker: torch runs on 1 thread in this step: the worker had {threads} "
            "threads when it forked (a thread pool started while importing); see docs/pytest.md",
            file=sys.stderr,
        )


def main(modules: Sequence[str], lanes_only: bool) -> int:
    """Preload ``modules``, then serve on ``$SCENERUN_FORK_SERVER`` until stdin closes. ``lanes_only`` (the fork
    server): a process with more than one thread refuses to serve (a lane's torch must
    keep its thread pool); a worker's steps run torch on one thread instead."""
    # The protocol gets a private fd before anything can write to fd 1 or read fd 0;
    # fd 1 then goes where stderr goes (the server's log).
    proto = os.dup(1)
    requests = os.dup(0)
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    n = preload(modules, quiet_missing=not lanes_only)
    threads = thread_count()
    if threads > 1:
        print(
            f"scenerun_pytest server: {threads} threads after the imports (a fork copies only "
            "the calling one)" + ("; not serving" if lanes_only else "; torch runs on one thread in each step"),
            file=sys.stderr,
        )
        if lanes_only:
            return 3
    path = os.environ.get(forks.ENV)
    if not path:
        print(f"scenerun_pytest server: ${forks.ENV} names no socket", file=sys.stderr)
        return 4
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    _subreaper()
    # What the imports made is never freed by a child's garbage collector: its pages stay
    # shared instead of being copied into every child (as pre-fork servers do).
    gc.freeze()
    ready = {"ready": True, "pid": os.getpid(), "threads": threads, "modules": n}
    return Server(proto, requests, listener, not lanes_only).run(ready)
