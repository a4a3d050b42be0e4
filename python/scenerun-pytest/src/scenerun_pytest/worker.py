"""``python -m scenerun_pytest worker [PYTEST ARGS...]``: a warm worker (docs/warm.md,
"Workers"): the one server (``server``) preloading what the suite imports from outside
the project.

Invariant: what it preloads is what every step's own process imports too, never a test
file or a conftest. A throwaway fork collects the suite (its arguments are the suite's
paths and options, as ``collect`` takes them) and names the modules that collection
imported from outside the project (the interpreter's library, site-packages: torch,
numpy, pytest) and the project modules the initial conftests imported before collection
began; the server imports those by name (recording their project imports for the
steps' depfiles) and serves. Each step's child then collects its own class as
``python -m scenerun_pytest fixture|golden`` does in a process of its own, so a module
global or a seed that another test file set at import time never reaches it, and its
depfile is what that process would write.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Sequence

from . import server


def _probe(pytest_args: Sequence[str]) -> tuple[int, list[str]]:
    """pytest's status collecting the suite, and the modules from outside the project that
    it imported, in the order they were loaded (collected in a fork that then exits)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(r)
            os.dup2(2, 1)  # fd 1 is the protocol's until the server takes it
            import pytest

            from . import phases

            root = phases.ImportLog(os.getcwd())
            early = _Early()
            code = int(pytest.main([*phases.COLLECT_ARGS, *pytest_args], plugins=[early]))
            names = []
            for name, module in list(sys.modules.items()):
                top = name.split(".")[0]
                if top in ("scenerun_pytest", "__main__") or name.startswith("_pytest.assertion.rewrite"):
                    continue
                file = getattr(module, "__file__", None)
                if not file or _is_test_or_conftest(file):
                    continue
                # pytest rewrites its asserts when it imports it (a `-p` plugin, a
                # registered package): imported in the server, it would not be.
                if early.rewritten(name):
                    continue
                # From outside the project; or a project module the conftests imported
                # before collection, which every step's process imports too.
                if root._file(name, file) is None or name in early.loaded:
                    names.append(name)
            data = json.dumps(names).encode()
            while data:
                data = data[os.write(w, data) :]
        except BaseException as e:  # noqa: BLE001 -- the server then preloads nothing
            print(f"scenerun_pytest worker: collecting to find what to preload: {e!r}", file=sys.stderr)
            code = 3
        finally:
            os._exit(code)
    os.close(w)
    data = b""
    while True:
        more = os.read(r, 1 << 16)
        if not more:
            break
        data += more
    os.close(r)
    _, status = os.waitpid(pid, 0)
    try:
        names = json.loads(data or b"[]")
    except ValueError:
        names = []
    return os.waitstatus_to_exitcode(status), [str(n) for n in names]


class _Early:
    """The modules loaded before collection starts: the plugins, the initial conftests and
    what they import (every step's own process loads those conftests too)."""

    def __init__(self) -> None:
        self.loaded: set[str] = set()
        self.marked: frozenset[str] = frozenset()

    def pytest_collection(self, session: Any) -> None:
        self.loaded = set(sys.modules)
        hook = getattr(getattr(session.config, "_assertstate", None), "hook", None)
        self.marked = frozenset(getattr(hook, "_must_rewrite", ()) or ())

    def rewritten(self, name: str) -> bool:
        return any(name == m or name.startswith(m + ".") for m in self.marked)


def _is_test_or_conftest(file: str) -> bool:
    base = os.path.basename(file)
    return base == "conftest.py" or base.startswith("test_") or base.endswith("_test.py")


def main(pytest_args: Sequence[str]) -> int:
    code, modules = _probe(pytest_args)
    # As pytest would end (a usage error, a collection error): no worker; its steps run
    # as processes. No test collected is no reason not to serve.
    if code not in (0, 5):
        print(f"scenerun_pytest worker: pytest ended before serving (exit {code})", file=sys.stderr)
        return code
    sys.stdout.flush()
    # What the project modules it preloads import is recorded for its forks' depfiles.
    from . import phases

    imports = phases.ImportLog(os.getcwd())
    imports.install()
    imports.hand_down()
    return server.main(modules, lanes_only=False)
