"""The batch a scenerun lane (or one device step) runs, and what it reports of it.

Invariant: every scene of the batch ends with exactly one ``end`` record (its verdict),
written as one whole line, unless the device runtime was poisoned while it ran: then it
gets no end, the lane writes one ``restart`` record and stops, and scenerun runs the
scene again in a fresh process. A scene is never reported skipped or passed because the
runtime was poisoned under it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, TypedDict, Union

from .outcome import Outcome, Verdict

CASE_OPTION = "--scenerun-case"


# The records this process writes to the results file (docs/lanes.md); the key order of
# each JSON line is the order the keys are set in.


class StartRecord(TypedDict):
    scene: str
    event: Literal["start"]


class _EndRecordKeys(TypedDict):
    scene: str
    event: Literal["end"]
    outcome: str  # an Outcome's value
    duration_secs: float
    message: str


class EndRecord(_EndRecordKeys, total=False):
    #: The size of the process's output file once its streams are flushed: where the
    #: scene's share of the output ends (none when the output is no regular file).
    output_bytes: int
    #: A failed scene's failure as pytest words it (traceback, captured output), which
    #: pytest itself prints only in its summary at the session's end.
    failure_text: str


#: The most of a failure's text an end record carries (its end: where the error is).
FAILURE_TEXT_CAP = 8192


class RestartRecord(TypedDict):
    event: Literal["restart"]
    reason: str


class ReadyRecord(TypedDict):
    """A process started before the lock is collected and waits for its ids (prestart)."""

    event: Literal["ready"]
    unix_secs: float


Record = Union[StartRecord, EndRecord, RestartRecord, ReadyRecord]


def case_of_args(args: Any) -> str | None:
    for a in args or ():
        if isinstance(a, str) and a.startswith(CASE_OPTION + "="):
            return a[len(CASE_OPTION) + 1 :]
    return None


@dataclass(frozen=True)
class Entry:
    """One scene of the batch, as scenerun's ``{scenes}`` file gives it."""

    scene: str
    args: tuple[str, ...] | None  # None: every collected test belongs to it
    case: str | None
    kernels: str | None = None
    fixture: str | None = None
    golden: str | None = None
    timeout_secs: float | None = None
    outputs: str | None = None  # the scene's own directory ($SCENERUN_SCENE_OUTPUTS)

    @classmethod
    def from_line(cls, record: Mapping[str, Any]) -> "Entry":
        args = record.get("args")
        words = tuple(str(a) for a in args) if isinstance(args, list) else None
        timeout = record.get("timeout_secs")
        return cls(
            scene=str(record["scene"]),
            args=words,
            case=case_of_args(words),
            kernels=record.get("kernels") or None,
            fixture=record.get("fixture") or None,
            golden=record.get("golden") or None,
            timeout_secs=float(timeout) if isinstance(timeout, (int, float)) else None,
            outputs=record.get("outputs") or None,
        )

    def owns(self, test_id: str) -> bool:
        """The batch entry runs this test (``path::Class`` owns ``path::Class::test_x[p]``)."""
        if self.args is None:
            return True
        return any(_owns(a, test_id) for a in self.args if not a.startswith("-"))


OUTPUTS_ENV = "SCENERUN_SCENE_OUTPUTS"


@contextlib.contextmanager
def scene_outputs(entry: Entry | None) -> Iterator[None]:
    """``$SCENERUN_SCENE_OUTPUTS`` is the entry's own outputs directory while its test
    runs, and what it was before afterwards (docs/pytest.md): what a suite writes there
    is kept per scene in the report dir."""
    if entry is None or not entry.outputs:
        yield
        return
    before = os.environ.get(OUTPUTS_ENV)
    os.environ[OUTPUTS_ENV] = entry.outputs
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(OUTPUTS_ENV, None)
        else:
            os.environ[OUTPUTS_ENV] = before


def _owns(arg: str, test_id: str) -> bool:
    return test_id == arg or test_id.startswith(arg + "::") or test_id.startswith(arg + "[")


class ResultsFile:
    """The results protocol's writer: one JSON object per line, one ``write`` per line,
    so a crash never leaves half a record (docs/lanes.md)."""

    def __init__(self, path: str | None):
        self.path = path

    def write(self, record: Record) -> None:
        if not self.path:
            return
        line = (json.dumps(record) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


@dataclass
class Batch:
    """What this process runs and what it has reported of it."""

    entries: list[Entry]
    results: ResultsFile
    in_lane: bool
    #: SceneTest per-case nodes and node scenes: pytest node id -> its entry.
    scene_of: dict[str, Entry] = field(default_factory=dict)
    #: A scene class's runner node -> the batch's cases of it, batch order.
    cases_of: dict[str, list[Entry]] = field(default_factory=dict)
    left: dict[str, int] = field(default_factory=dict)  # scene -> its items not finished
    #: scene -> the verdict of its tests so far (rule 2, :meth:`Outcome.of_tests`).
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    #: A node scene's node reporting now -> its entry and its phases' verdict (rule 1).
    phases: dict[str, tuple[Entry, Verdict]] = field(default_factory=dict)
    started: dict[str, float] = field(default_factory=dict)
    ended: set[str] = field(default_factory=set)
    #: The case entry whose case runs now (served functions answer only for it).
    current: Entry | None = None
    #: Why the runtime is poisoned; the lane restarts once the running scene is done.
    restart: str | None = None
    restart_said: bool = False
    #: Flushes the process's output and says how far it stands (``output_bytes``);
    #: the plugin sets it, none outside pytest.
    output_mark: Callable[[], int | None] | None = None
    #: scene -> its failures as pytest words them so far (``failure_text``).
    failures: dict[str, list[str]] = field(default_factory=dict)

    def start(self, entry: Entry) -> None:
        if entry.scene not in self.started:
            self.started[entry.scene] = time.monotonic()
            self.results.write({"scene": entry.scene, "event": "start"})

    def note(self, entry: Entry, verdict: Verdict) -> None:
        """One test of the scene ended so (a case, or a node whose phases are all in)."""
        old = self.verdicts.get(entry.scene)
        self.verdicts[entry.scene] = verdict if old is None else old.of_tests(verdict)

    def note_phase(self, nodeid: str, entry: Entry, verdict: Verdict) -> None:
        """One phase of a node scene's node ended so; the node counts when it finishes."""
        old = self.phases.get(nodeid)
        self.phases[nodeid] = (entry, verdict if old is None else old[1].of_phases(verdict))

    def keep_failure(self, entry: Entry, text: str) -> None:
        """A failure of the scene in pytest's words: its end record carries it."""
        if text.strip():
            self.failures.setdefault(entry.scene, []).append(text.rstrip("\n"))

    def expect(self, entry: Entry) -> None:
        self.left[entry.scene] = self.left.get(entry.scene, 0) + 1

    def finish(self, entry: Entry) -> None:
        """One more item of the scene is done; the last one ends the scene."""
        for nodeid, (owner, verdict) in list(self.phases.items()):
            if owner.scene == entry.scene:
                del self.phases[nodeid]
                self.note(owner, verdict)
        self.left[entry.scene] = self.left.get(entry.scene, 1) - 1
        if self.left[entry.scene] > 0 or entry.scene in self.ended:
            return
        self.end(entry, self.verdicts.get(entry.scene, Verdict(Outcome.PASSED)))

    def end(self, entry: Entry, verdict: Verdict) -> None:
        if entry.scene in self.ended:
            return
        self.ended.add(entry.scene)
        began = self.started.get(entry.scene)
        record: EndRecord = {
            "scene": entry.scene,
            "event": "end",
            "outcome": verdict.outcome.value,
            "duration_secs": round(time.monotonic() - began, 6) if began is not None else 0.0,
            "message": verdict.message,
        }
        at = self.output_mark() if self.output_mark else None
        if at is not None:
            record["output_bytes"] = at
        failures = self.failures.pop(entry.scene, [])
        if failures and verdict.outcome in (Outcome.FAILED, Outcome.ERROR):
            record["failure_text"] = "\n".join(failures)[-FAILURE_TEXT_CAP:]
        self.results.write(record)
        if self.restart is not None:
            self.say_restart()

    def poison(self, reason: str) -> None:
        """The runtime is poisoned: the lane restarts once the running scene has ended
        (its own verdict stands); scenes without an end rerun in the fresh process."""
        if self.restart is None:
            self.restart = reason

    def say_restart(self) -> None:
        if self.restart is not None and not self.restart_said:
            self.restart_said = True
            self.results.write({"event": "restart", "reason": self.restart})

    def scenes(self) -> set[str]:
        found = {e.scene for e in self.scene_of.values()}
        found.update(e.scene for es in self.cases_of.values() for e in es)
        return found


def load(environ: Mapping[str, str], cases: list[str]) -> Batch | None:
    """The batch scenerun handed this process, or None outside scenerun."""
    scenes = environ.get("SCENERUN_SCENES")
    if scenes:
        with open(scenes, encoding="utf-8") as f:
            entries = [Entry.from_line(json.loads(line)) for line in f if line.strip()]
        return Batch(entries, ResultsFile(environ.get("SCENERUN_RESULTS")), in_lane=True)
    if environ.get("SCENERUN_SCENE") and environ.get("SCENERUN_FIXTURE"):
        entry = Entry(
            scene=environ["SCENERUN_SCENE"],
            args=None,
            case=cases[0] if cases else None,
            kernels=environ.get("SCENERUN_KERNELS") or None,
            fixture=environ.get("SCENERUN_FIXTURE") or None,
            golden=environ.get("SCENERUN_GOLDEN") or None,
        )
        return Batch([entry], ResultsFile(None), in_lane=False)
    return None
