"""Poison signals that suites already emit, mapped to a lane restart with no adopter code.

A suite whose shared device runtime gets poisoned (one device error leaves the context
unusable for every later test in the process) often skips the rest and asks its own
dispatcher to rerun them in a fresh process. hw-native-sys/simpler does it this way: its
``st_worker`` fixture appends ``{"selector": "Class::", "nodeid": ...}`` to the file
named by ``SIMPLER_L2_POISON_SINK`` right before it skips a class for that reason.

Inside a scenerun lane such a skip is not a verdict: the plugin points each known sink
variable at a file of its own (unless the variable is already set), and when a node is
skipped while a record naming it (or its class) arrived, the node's scenes get no end,
the lane writes a restart and stops, and scenerun reruns them in a fresh process.
Invariant: a record is read once; a skip that no record names stays a skip.

Known sinks: ``SIMPLER_L2_POISON_SINK``; a project adds its own variable names with
``[tool.scenerun] poison_sinks = ["MY_SINK"]``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, MutableMapping

KNOWN_SINKS = ("SIMPLER_L2_POISON_SINK",)
#: A sink file is read up to this many bytes per check (a record is a short line).
_READ_CAP = 1 << 20


@dataclass
class Sinks:
    paths: dict[str, str] = field(default_factory=dict)
    offsets: dict[str, int] = field(default_factory=dict)

    @classmethod
    def install(cls, names: list[str], directory: str, environ: MutableMapping[str, str]) -> "Sinks":
        sinks = cls()
        for name in names:
            path = environ.get(name)
            if not path:
                path = os.path.join(directory, f"scenerun-poison-{os.getpid()}-{name}.jsonl")
                environ[name] = path
            sinks.paths[name] = path
            sinks.offsets[name] = _size(path)
        return sinks

    def _new_records(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for name, path in self.paths.items():
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                os.lseek(fd, self.offsets[name], os.SEEK_SET)
                data = os.read(fd, _READ_CAP)
            finally:
                os.close(fd)
            complete = data[: data.rfind(b"\n") + 1]
            self.offsets[name] += len(complete)
            for line in complete.splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict):
                    out.append(record)
        return out

    def poisoned(self, nodeid: str, cls_name: str | None) -> bool:
        """Whether a record that arrived since the last check names this node."""
        hit = False
        for record in self._new_records():
            if record.get("nodeid") == nodeid:
                hit = True
            selector = record.get("selector")
            if cls_name and isinstance(selector, str) and selector in (cls_name, f"{cls_name}::"):
                hit = True
        return hit


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def sink_names(pyproject: dict[str, Any]) -> list[str]:
    extra = pyproject.get("poison_sinks", [])
    if isinstance(extra, str):
        extra = [extra]
    names = list(KNOWN_SINKS)
    names.extend(n for n in extra if isinstance(n, str) and n and n not in names)
    return names
