"""The one server (scenerun_pytest.server) with real processes: its messages are the ones
schemas/server_*.schema.json describe (generated from scenerun's types), a client that
goes away never takes it down, a child runs only for a client that confirmed, and a
forked child observes what the command run as written observes."""

import json
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from scenerun_pytest import forks

SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"

PROBE = """import json, os, resource, sys
print(json.dumps({
    "umask": oct(os.umask(0)),
    "nofile": resource.getrlimit(resource.RLIMIT_NOFILE),
    "nice": os.getpriority(os.PRIO_PROCESS, 0),
    "affinity": sorted(os.sched_getaffinity(0)),
    "cwd": os.getcwd(),
    "x": os.environ.get("PROBE_X"),
    "optimize": sys.flags.optimize,
    "hash": hash("scenerun"),
    "forked": hasattr(sys, "_scenerun_forked"),
}))
"""


def validator(message):
    """The validator of one message of the protocol (``ready``, ``request``, ...)."""
    s = json.loads((SCHEMAS / f"server_{message}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(s)
    return jsonschema.Draft202012Validator(s)


@pytest.fixture
def served(tmp_path):
    """A fork server (``zygote``) in tmp_path, ready; its ready line."""
    (tmp_path / "probe.py").write_text(PROBE)
    sock = tmp_path / "s"
    env = dict(os.environ, SCENERUN_FORK_SERVER=str(sock), PYTHONHASHSEED="11")
    env.pop("PYTHONPATH", None)
    p = subprocess.Popen(
        [sys.executable, "-m", "scenerun_pytest", "zygote", "json"],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=open(tmp_path / "server.log", "w"),
    )
    ready = json.loads(p.stdout.readline())
    yield tmp_path, env, ready, p
    p.stdin.close()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def run(tmp_path, env, shell_prefix="", via_server=True, python_opts=""):
    e = dict(env)
    if not via_server:
        e.pop("SCENERUN_FORK_SERVER")
    mod = "-m scenerun_pytest fork probe" if via_server else "-m probe"
    # Files, not pipes: a server that never answers holds the descriptors it was sent.
    with open(tmp_path / "out", "w+") as out, open(tmp_path / "err", "w+") as err:
        code = subprocess.run(
            ["sh", "-c", f"{shell_prefix} {sys.executable} {python_opts} {mod}"],
            cwd=tmp_path,
            env=e,
            stdout=out,
            stderr=err,
            timeout=60,
        ).returncode
        out.seek(0)
        err.seek(0)
        said = err.read()
        assert code == 0, said
        return json.loads(out.read()), said


def test_the_ready_line_and_a_lane_request_are_what_the_schemas_describe(served):
    _, env, ready, p = served
    assert validator("ready").is_valid(ready) and ready["pid"] == p.pid
    request = {
        "module": "probe",
        "args": [],
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "pgid": os.getpgrp(),
        "interpreter": forks.interpreter_state(),
        "process": forks.process_state(),
    }
    v = validator("request")
    assert v.is_valid(request), list(v.iter_errors(request))
    assert not v.is_valid({"module": "probe", "args": []})
    for message, answer in (("started", {"pid": 3}), ("refused", {"error": "why"}), ("ended", {"status": 0})):
        assert validator(message).is_valid(answer)
    assert not validator("started").is_valid({"error": "why"})
    assert not validator("ready").is_valid({"ready": True})


def test_what_the_command_line_sets_is_what_the_forked_child_observes(served):
    tmp_path, env, _, _ = served
    prefix = "umask 027; ulimit -n 512; PROBE_X=1 nice -n 3 taskset -c 0"
    forked, _ = run(tmp_path, env, prefix)
    plain, _ = run(tmp_path, env, prefix, via_server=False)
    assert forked.pop("forked") is True
    assert plain.pop("forked") is False
    assert forked == plain
    assert plain["umask"] == "0o27" and plain["nofile"] == [512, 512] and plain["affinity"] == [0]


def test_what_a_fork_cannot_take_runs_as_written_and_says_why(served):
    tmp_path, env, _, _ = served
    for prefix, opts, why in [
        ("PYTHONHASHSEED=5", "", "PYTHONHASHSEED differs"),
        ("", "-O", "sys.flags.optimize"),
    ]:
        forked, err = run(tmp_path, env, prefix, python_opts=opts)
        plain, _ = run(tmp_path, env, prefix, via_server=False, python_opts=opts)
        assert forked.pop("forked") is False, err
        plain.pop("forked")
        assert forked == plain
        assert why in err and "running it as written" in err, err


def _frame(obj):
    data = json.dumps(obj).encode()
    return struct.pack("!I", len(data)) + data


def test_a_client_that_goes_away_never_takes_the_server_down(served):
    tmp_path, env, _, p = served
    path = env["SCENERUN_FORK_SERVER"]
    # Half a request, then gone.
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.sendall(_frame({"module": "probe"})[:7])
    s.close()
    # Something that is JSON but no request.
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    socket.send_fds(s, [_frame([1, 2])], [0, 1, 2])
    s.close()
    # A whole request, gone before the answer: no child may run for it.
    marker = tmp_path / "twin"
    (tmp_path / "twin.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    req = {
        "module": "twin",
        "args": [],
        "cwd": str(tmp_path),
        "env": {k: v for k, v in env.items()},
        "pgid": os.getpgrp(),
        "interpreter": forks.interpreter_state(),
        "process": forks.process_state(),
    }
    for _ in range(3):
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        socket.send_fds(s, [_frame(req)], [0, 1, 2])
        s.close()
    time.sleep(0.5)
    assert p.poll() is None, (tmp_path / "server.log").read_text()
    served_after, err = run(tmp_path, env)
    assert served_after["forked"] is True, err
    assert not marker.exists(), "a child ran for a client that never confirmed"


def test_a_server_that_never_answers_costs_a_bounded_wait(tmp_path):
    (tmp_path / "probe.py").write_text(PROBE)
    sock = tmp_path / "s"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(sock))
    listener.listen(8)  # accepts into its backlog, never answers
    env = dict(os.environ, SCENERUN_FORK_SERVER=str(sock))
    env.pop("PYTHONPATH", None)
    try:
        plain, err = run(tmp_path, env)
    finally:
        listener.close()
    assert plain["forked"] is False
    assert "did not answer within 5s" in err, err


def test_a_step_request_on_the_socket_is_answered_started_then_ended_as_the_schemas_say(served):
    """scenerun's request for a warm step: no process group, interpreter or process state
    (the server's own); the child writes into the descriptors sent, and its end comes on
    the same connection. Nothing is served on stdin any more."""
    tmp_path, env, _, p = served
    (tmp_path / "step.py").write_text("import sys; print('step ran'); sys.exit(3)\n")
    log = open(tmp_path / "step.log", "w+")
    null = open(os.devnull)
    req = {"module": "step", "args": [], "cwd": str(tmp_path), "env": env}
    assert validator("request").is_valid(req)
    s = socket.socket(socket.AF_UNIX)
    s.connect(env["SCENERUN_FORK_SERVER"])
    forks.send_message(s, req, [null.fileno(), log.fileno(), log.fileno()])
    started, _ = forks.recv_message(s)
    assert validator("started").is_valid(started), started
    s.sendall(b"1")
    ended, _ = forks.recv_message(s)
    assert validator("ended").is_valid(ended), ended
    assert os.waitstatus_to_exitcode(ended["status"]) == 3
    log.seek(0)
    assert log.read() == "step ran\n"
    s.close()
