"""``python -m scenerun_pytest worker [PYTEST ARGS...]``: a warm worker (docs/warm.md,
"Workers"). It pays the interpreter, the imports, the conftests and one collection of
the suite (its arguments are the suite's paths and options, as ``collect`` takes them)
once, then runs fixture and golden steps on request, each in a fork of itself.

Invariants:

* **Fork per step.** The worker serves requests from inside its own
  ``pytest_runtestloop`` (tryfirst, returning True, so a suite's own runtestloop never
  runs). For each step it forks a child that takes the step's environment, directory
  and log (fd 1 and 2), runs the phase on the item it collected (or collects the path
  itself when the class is not in the session), writes the step's depfile and
  ``_exit``\\ s with the phase's status. No object of one step is visible to the next,
  an exception fails only its step, and a crash of a step (a segfault, ``os._exit``, a
  signal) is that step's status while the worker lives on.
* **The parent stays fork-safe.** It collects and waits: it runs no fixture or golden
  code, no torch operation and starts no thread before it forks (a thread pool that
  exists at the fork — OpenMP's, say — is not in the child, and libgomp hangs in the
  child's next parallel region). The ready line says how many threads the worker has;
  when it has more than one (a test module computed tensors at import time) and torch is
  loaded, each step's fork runs torch on one thread, and its log says so.
* **The protocol is never mixed with output.** At start the worker moves its fd 1 (the
  pipe to scenerun) to a private fd for its protocol lines, and its requests' fd 0 to
  another; fd 1 then points at the worker's log (its stderr). One JSON line each way:
  request ``{"id", "command", "cwd", "env", "log", "timeout_secs"}``; answer ``{"id",
  "status", "signal", "depfile_written", "note"}`` or ``{"id", "unsupported": why}``
  for a command that is not ``python -m scenerun_pytest fixture|golden ...`` (scenerun
  then runs it as a process). ``{"ready": true, "pid", "threads", "classes"}`` comes
  first, once collection is done. Stdin closed: the worker exits.

scenerun keeps each step's timeout (it kills the worker's whole process group) and the
worker's memory cap; neither needs anything from here.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import os
import shlex
import signal
import sys
import traceback
from types import MappingProxyType
from typing import Any, Callable, Iterator, Mapping, NoReturn, Sequence, TypedDict, Union

import pytest

from . import phases
from .forks import exit_code, thread_count

#: Tokens of shell syntax: a command holding one needs the shell (run as a process).
_SHELL = frozenset("|&;<>()`$")

#: Modules the codec's libraries import on first use (a save, a load): imported once in
#: the worker, when the library is loaded, not again in every fork. Imports only: no
#: operation of the library runs before a fork.
_LAZY: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "torch": ("torch.utils.serialization", "torch._weights_only_unpickler"),
        "numpy": ("numpy.lib.format",),
    }
)


def _preload() -> None:
    import importlib

    for lib, modules in _LAZY.items():
        if lib in sys.modules:
            for m in modules:
                try:
                    importlib.import_module(m)
                except Exception:  # noqa: BLE001 -- another version: the fork imports it
                    pass


# The protocol's lines (see above); the key order of each JSON line is the order the
# keys are set in.


class Request(TypedDict, total=False):
    """What scenerun asks for: one step."""

    id: Any  # echoed back as it came
    command: str
    cwd: str
    env: dict[str, str] | None
    log: str
    timeout_secs: float


class Ready(TypedDict):
    ready: bool
    pid: int
    threads: int
    classes: int


class Unsupported(TypedDict):
    id: Any
    unsupported: str


class _Ran(TypedDict):
    id: Any
    status: int
    note: str | None


class Ran(_Ran, total=False):
    """A step that ran in a fork: its exit status, and the signal that ended it if one did."""

    signal: int
    depfile_written: bool


Answer = Union[Ready, Unsupported, Ran]


def phase_of(command: str) -> tuple[phases.Phase, list[str]] | str:
    """(phase, its arguments) of ``[any interpreter] -m scenerun_pytest fixture|golden
    ...``; for anything else, why a worker does not run it."""
    if any(c in _SHELL for c in command):
        return "the command uses shell syntax"
    try:
        argv = shlex.split(command)
    except ValueError as e:
        return f"cannot split the command: {e}"
    if len(argv) < 4 or "=" in argv[0] or argv[1:3] != ["-m", "scenerun_pytest"]:
        return "not a `python -m scenerun_pytest` command"
    if argv[3] not in ("fixture", "golden"):
        return f"`scenerun_pytest {argv[3]}` is not served by a worker"
    return phases.Phase(argv[3]), argv[4:]


def _depfile_of(args: Sequence[str]) -> str | None:
    for i, a in enumerate(args):
        if a == "--depfile" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--depfile="):
            return a.split("=", 1)[1]
    return None


def _one_torch_thread_after(threads: int) -> None:
    """In a fork of a worker that had a thread pool: torch's intra-op pool (OpenMP) may be
    one of the threads the fork lost, and libgomp then hangs in the next parallel region.
    One thread never enters it."""
    torch = sys.modules.get("torch")
    if threads > 1 and torch is not None and hasattr(torch, "set_num_threads"):
        torch.set_num_threads(1)
        print(
            f"scenerun_pytest worker: torch runs on 1 thread in this step: the worker had {threads} "
            "threads when it forked (a thread pool started while collecting); see docs/pytest.md",
            file=sys.stderr,
        )


class _Serve:
    """The worker's plugin: indexes the collected scene classes, then serves."""

    def __init__(self, proto: int, requests: int, imports: phases.ImportLog):
        self.proto, self.requests, self.imports = proto, requests, imports
        self.items: dict[tuple[str, str], pytest.Function] = {}  # (real path, class name) -> first item
        self.served = False
        self.parser: Callable[[str], argparse.ArgumentParser] | None = None  # the phases' parser, once serving

    def pytest_itemcollected(self, item: pytest.Item) -> None:
        cls = getattr(item, "cls", None)
        if isinstance(item, pytest.Function) and cls is not None:
            self.items.setdefault((os.path.realpath(str(item.path)), cls.__name__), item)

    def find(self, path: str, cls_name: str) -> pytest.Function | None:
        return self.items.get((os.path.realpath(path), cls_name))

    def say(self, record: Answer) -> None:
        line = (json.dumps(record) + "\n").encode()
        while line:
            line = line[os.write(self.proto, line) :]

    def _lines(self) -> Iterator[bytes]:
        buf = b""
        while True:
            chunk = os.read(self.requests, 65536)
            if not chunk:
                return
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.strip():
                    yield line

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        self.served = True
        # What every fork needs of the plugin is loaded once, here (it is no suite code),
        # and which loaded module is a project file is known before the first fork.
        self.parser = phases.phase_parser
        _preload()
        self.imports.files(list(sys.modules))
        # What collection made is never freed by a fork's garbage collector: its pages stay
        # shared instead of being copied into every step (as pre-fork servers do).
        gc.freeze()
        threads = thread_count()
        if threads > 1:
            print(
                f"scenerun_pytest worker: {threads} threads before the first fork: a thread pool "
                "started while collecting is not in the steps' forks (torch then runs on one "
                "thread in them; see docs/pytest.md)",
                file=sys.stderr,
            )
        self.say({"ready": True, "pid": os.getpid(), "threads": threads, "classes": len(self.items)})
        for line in self._lines():
            self.serve(session, json.loads(line))
        return True

    def serve(self, session: pytest.Session, request: Request) -> None:
        rid = request.get("id")
        found = phase_of(request.get("command", ""))
        if isinstance(found, str):
            self.say({"id": rid, "unsupported": found})
            return
        phase, args = found
        sys.stdout.flush()
        sys.stderr.flush()
        threads = thread_count()
        pid = os.fork()
        if pid == 0:
            self._child(session, request, phase, args, threads)
        _, status = os.waitpid(pid, 0)
        depfile = _depfile_of(args)
        if depfile and not os.path.isabs(depfile):
            depfile = os.path.join(request.get("cwd", "."), depfile)
        reply: Ran = {"id": rid, "status": os.waitstatus_to_exitcode(status), "note": None}
        if os.WIFSIGNALED(status):
            reply["signal"] = os.WTERMSIG(status)
        reply["depfile_written"] = bool(depfile and os.path.isfile(depfile))
        self.say(reply)

    def _child(
        self, session: pytest.Session, request: Request, phase: phases.Phase, args: list[str], threads: int
    ) -> NoReturn:
        """The step, in the fork (the worker had `threads` threads then): never returns."""
        code = 70
        try:
            os.close(self.proto)
            os.close(self.requests)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
            os.chdir(request["cwd"])
            os.environ.update(request.get("env") or {})
            log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.close(log)
            # A step stopped at its timeout shows where it was.
            faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
            _one_torch_thread_after(threads)
            code = self._run(session, phase, args)
        except SystemExit as e:
            code = exit_code(e)
        except BaseException:  # noqa: BLE001 -- the step's failure, in its log
            traceback.print_exc()
            code = 1
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)

    def _run(self, session: pytest.Session, phase: phases.Phase, args: list[str]) -> int:
        assert self.parser is not None, "serving starts with the parser"
        opts = self.parser(phase.value).parse_args(args)
        try:
            path, cls_name = phases.split_nodeid(opts.nodeid)
            phases.check_paths(path, opts.out)
            item = self.find(path, cls_name) or self._collect(session, path, cls_name)
            if item is None:
                raise phases.UsageError(f"no class {cls_name} was collected from that path")
            fixture = getattr(opts, "fixture", None)
            try:
                deps = phases.run_step(
                    phase,
                    item,
                    opts.case,
                    os.path.abspath(opts.out),
                    fixture and os.path.abspath(fixture),
                    self.imports,
                    [path] if opts.source_digest else [],
                )
            except phases.UsageError:
                raise
            except Exception:  # noqa: BLE001 -- the user's code failed: show where
                print(traceback.format_exc(), file=sys.stderr, end="")
                return 1
        except phases.UsageError as e:
            print(f"scenerun_pytest {phase.value}: {e}", file=sys.stderr)
            return 4
        if opts.depfile:
            phases.write_depfile(opts.depfile, deps)
        return 0

    def _collect(self, session: pytest.Session, path: str, cls_name: str) -> pytest.Function | None:
        """The class is not in the worker's session: collect its file here, in the fork."""
        try:
            session.perform_collect([f"{path}::{cls_name}"])
        except Exception as e:  # noqa: BLE001 -- reported as "not collected"
            print(f"scenerun_pytest worker: collecting {path}::{cls_name}: {e}", file=sys.stderr)
        return self.find(path, cls_name)


def main(pytest_args: Sequence[str]) -> int:
    # The protocol gets private fds before pytest (or anything else) can write to fd 1
    # or read fd 0; fd 1 then goes where stderr goes (the worker's log).
    proto = os.dup(1)
    requests = os.dup(0)
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    imports = phases.ImportLog(os.getcwd())
    imports.install()
    plugin = _Serve(proto, requests, imports)
    code = pytest.main([*phases.COLLECT_ARGS, *pytest_args], plugins=[plugin])
    if not plugin.served:
        print(f"scenerun_pytest worker: pytest ended before serving (exit {int(code)})", file=sys.stderr)
        return int(code) or 1
    return 0
