"""A fork server for lane processes (docs/lanes.md, "A fork server").

``python -m scenerun_pytest zygote MODULE...`` imports the modules once (torch, pytest,
a project's own package), listens on the UNIX socket ``$SCENERUN_FORK_SERVER`` and says
``ready`` on stdout. ``python -m scenerun_pytest fork MODULE ARGS...`` is what a lane runs
instead of ``python -m MODULE ARGS...``: a small process that asks the server for a
child and stands for it. The child is forked from the server (the imports are already
done), joins this process's process group, takes its stdin, stdout and stderr (passed
over the socket), its working directory, environment and arguments, and runs
``MODULE`` as ``__main__``. This process waits for the server to say how the child
ended and ends the same way (the same exit status, or the same signal).

Invariant: whatever the server cannot do, the lane still runs as written. No server,
a server in another session (the child could not join this process's group), a refusal,
a server that goes away before it answered: this process replaces itself with
``python -m MODULE ARGS...``. Signals sent to the group reach the child as they would
reach the lane itself; this process ignores them and only relays the ending.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
import time
from typing import Any, Dict, Optional

from .forks import exit_code, thread_count

Message = Dict[str, Any]

ENV = "SCENERUN_FORK_SERVER"
# Signals a lane's group may get (a stop signal, the cancel, a dump request): the child
# acts on them, the process standing for it does not.
# What decides the interpreter a child would be, other than its executable: a lane whose
# values differ from the server's is not forked (it would get the server's sys.path).
SHAPING = ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "PYTHONNOUSERSITE", "PYTHONUSERBASE", "VIRTUAL_ENV")
RELAYED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def _send(sock: socket.socket, obj: Message, fds: Optional[list[int]] = None) -> None:
    data = json.dumps(obj).encode()
    msg = struct.pack("!I", len(data)) + data
    if fds:
        socket.send_fds(sock, [msg], fds)
    else:
        sock.sendall(msg)


def _same_user(sock: socket.socket) -> bool:
    """Whether the process at the other end of ``sock`` runs as this user (a server or a
    lane of someone else's is never talked to)."""
    cred = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", cred)
    return bool(uid == os.geteuid())


def _recv(sock: socket.socket, with_fds: bool = False) -> tuple[Optional[Message], list[int]]:
    """One message (length-prefixed JSON) and the descriptors that came with it."""
    fds: list[int] = []
    buf = b""
    if with_fds:
        first, fds, _, _ = socket.recv_fds(sock, 1 << 16, 3)
        buf = first
    while len(buf) < 4 or len(buf) < 4 + struct.unpack("!I", buf[:4])[0]:
        more = sock.recv(1 << 16)
        if not more:
            return None, fds
        buf += more
    n = struct.unpack("!I", buf[:4])[0]
    msg: Message = json.loads(buf[4 : 4 + n])
    return msg, fds


# ---------------------------------------------------------------------------- server


def zygote_main(modules: list[str]) -> int:
    path = os.environ.get(ENV)
    if not path:
        print(f"scenerun_pytest zygote: ${ENV} names no socket", file=sys.stderr)
        return 4
    for m in modules:
        try:
            __import__(m)
        except Exception as e:  # a module that fails here is imported by the child itself
            print(f"scenerun_pytest zygote: preloading {m} failed: {e!r}", file=sys.stderr)
    threads = thread_count()
    if threads > 1:
        # A fork copies only this thread: a lock another thread held stays held for ever.
        print(f"scenerun_pytest zygote: {threads} threads after the imports; not forking", file=sys.stderr)
        return 3
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print("ready", flush=True)
    return _serve(listener)


def _serve(listener: socket.socket) -> int:
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(sys.stdin, selectors.EVENT_READ, "stdin")
    children: dict[int, socket.socket] = {}
    open_ = True
    while open_ or children:
        for key, _ in sel.select(timeout=0.02):
            if key.data == "accept":
                conn, _ = listener.accept()
                pid = _start_child(conn, listener) if _same_user(conn) else None
                if pid:
                    children[pid] = conn
                else:
                    conn.close()
            elif key.data == "stdin" and not os.read(sys.stdin.fileno(), 1 << 10):
                # scenerun closed our stdin: no new children; wait for the ones running.
                sel.unregister(sys.stdin)
                sel.unregister(listener)
                listener.close()
                open_ = False
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            done = children.pop(pid, None)
            if done is not None:
                try:
                    _send(done, {"status": status})
                except OSError:
                    pass  # the process standing for it is gone (its group was killed)
                done.close()
    return 0


def _start_child(conn: socket.socket, listener: socket.socket) -> int | None:
    """Fork a child for one request; its pid, or None (the request was answered with an
    error, and the lane runs its own interpreter)."""
    try:
        conn.settimeout(5)  # a client that says nothing holds up no one for long
        req, fds = _recv(conn, with_fds=True)
        conn.settimeout(None)
    except (OSError, ValueError) as e:
        print(f"scenerun_pytest zygote: a bad request: {e!r}", file=sys.stderr)
        return None
    if req is None or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        return None
    differs = [v for v in SHAPING if req.get("env", {}).get(v) != os.environ.get(v)]
    if req.get("executable") != sys.executable or differs:
        what = ", ".join(differs) or f"the interpreter {req.get('executable')}"
        _send(conn, {"error": f"the lane's {what} differs from the server's"})
        for fd in fds:
            os.close(fd)
        return None
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(go_w)
        listener.close()
        # Wait until the parent has put us in the lane's group (or given up).
        ok = os.read(go_r, 1) == b"1"
        if not ok:
            os._exit(0)
        _become(req, fds, conn)
    os.close(go_r)
    for fd in fds:
        os.close(fd)
    try:
        os.setpgid(pid, int(req["pgid"]))
    except (OSError, KeyError, ValueError) as e:
        os.write(go_w, b"0")
        os.close(go_w)
        os.waitpid(pid, 0)
        _send(conn, {"error": f"cannot join process group {req.get('pgid')}: {e}"})
        return None
    os.write(go_w, b"1")
    os.close(go_w)
    _send(conn, {"pid": pid})
    return pid


def _become(req: Message, fds: list[int], conn: socket.socket) -> None:
    """In the child: take the lane's descriptors, directory, environment and arguments,
    run its module as ``__main__``, and exit with its status. Never returns."""
    import atexit
    import runpy

    code = 1
    try:
        conn.close()
        # As a fresh interpreter has them (the server changed none; this is a guard).
        for sig in RELAYED:
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdin = open(0, "r", closefd=False)
        sys.stdout = open(1, "w", closefd=False, buffering=1 if os.isatty(1) else -1)
        sys.stderr = open(2, "w", closefd=False, buffering=1)
        # This package was imported by the server to run it; pytest imports its plugin
        # again (and rewrites its asserts) as in a process of its own.
        for name in [n for n in sys.modules if n == "scenerun_pytest" or n.startswith("scenerun_pytest.")]:
            del sys.modules[name]
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        sys.path[0] = req["cwd"]
        sys.argv = [req["module"], *req["args"]]
        try:
            runpy.run_module(req["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            code = exit_code(e)
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code & 0xFF)


# ----------------------------------------------------------------------------- proxy


def fork_main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m scenerun_pytest fork MODULE [ARGS...]", file=sys.stderr)
        return 4
    module, args = argv[0], argv[1:]
    path = os.environ.get(ENV)
    if path:
        ended = _through_server(path, module, args)
        if ended is not None:
            return ended
    # No server, or it could not serve: run as the lane says.
    os.execv(sys.executable, [sys.executable, "-m", module, *args])


def _through_server(path: str, module: str, args: list[str]) -> int | None:
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        if not _same_user(sock):
            raise OSError(f"{path} is served by another user")
        req = {
            "module": module,
            "args": args,
            "cwd": os.getcwd(),
            "env": dict(os.environ),
            "pgid": os.getpgrp(),
            "executable": sys.executable,
        }
        # The group's signals are the child's from the moment it exists.
        for sig in RELAYED:
            signal.signal(sig, signal.SIG_IGN)
        _send(sock, req, [0, 1, 2])
        reply, _ = _recv(sock)
    except OSError:
        reply = None
    if reply is None or "pid" not in reply:
        for sig in RELAYED:
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if reply is not None:
            print(f"scenerun_pytest fork: {reply.get('error')}; starting its own interpreter", file=sys.stderr)
        return None
    pid = int(reply["pid"])
    try:
        ended, _ = _recv(sock)
    except OSError:
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
