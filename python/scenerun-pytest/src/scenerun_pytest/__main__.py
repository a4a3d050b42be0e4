"""``python -m scenerun_pytest collect|fixture|golden|worker|test``; see docs/pytest.md."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence


def _collect_parser() -> argparse.ArgumentParser:
    c = argparse.ArgumentParser(
        prog="python -m scenerun_pytest collect",
        description="print the scenes of the scene classes pytest collects (JSON); every "
        "argument not listed here (paths, --platform, -m, a conftest's options) goes to pytest",
        allow_abbrev=False,
    )
    c.add_argument("--python", default="python", help="interpreter named in the commands (default: python)")
    c.add_argument("--lane", default="pytest", help="lane of 1-device cases (N devices: LANE_xN)")
    c.add_argument(
        "--lane-for",
        action="append",
        default=[],
        metavar="N=LANE",
        help="lane of the cases that hold N devices",
    )
    c.add_argument(
        "--device-mode",
        choices=["lane", "process"],
        default="lane",
        help="lane: device steps share lane processes; process: one pytest per scene",
    )
    c.add_argument("--identity", default=None, help="identity command of fixture and golden steps")
    c.add_argument("--worker", default=None, metavar="NAME", help="fixture and golden steps run in this warm worker")
    c.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="NODE=REASON",
        help="keep a node (or every node under a prefix) out of scenerun, with the reason",
    )
    return c


def split_exclude(spec: str) -> tuple[str, str] | None:
    """``NODE=REASON``, split at the first ``=`` outside a parameter's brackets."""
    depth = 0
    for i, ch in enumerate(spec):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        elif ch == "=" and depth == 0:
            node, reason = spec[:i].strip(), spec[i + 1 :].strip()
            return (node, reason) if node and reason else None
    return None


USAGE = "usage: python -m scenerun_pytest {collect|fixture|golden|worker|test|zygote|fork} ...  (see docs/pytest.md)"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("zygote", "fork"):
        # A lane's fork server and the process that stands for a lane (docs/lanes.md).
        if argv[0] == "fork":
            from . import fork

            return fork.fork_main(argv[1:])
        from . import server

        return server.main(argv[1:], lanes_only=True)
    if not argv or argv[0] not in ("collect", "fixture", "golden", "worker", "test"):
        print(USAGE, file=sys.stderr)
        return 4 if argv and argv[0] not in ("-h", "--help") else 0
    command, rest = argv[0], argv[1:]
    from . import install

    clash = install.conflict()
    if clash:
        print(f"scenerun_pytest {command}: {clash}", file=sys.stderr)
        return 4
    if command == "collect":
        from . import collect

        parsed, pytest_args = _collect_parser().parse_known_args(rest)
        lanes: dict[int, str] = {}
        for spec in parsed.lane_for:
            n, _, name = spec.partition("=")
            if not n.isdigit() or not name:
                print(f"--lane-for {spec!r}: write N=LANE", file=sys.stderr)
                return 4
            lanes[int(n)] = name
        excludes: dict[str, str] = {}
        for spec in parsed.exclude:
            pair = split_exclude(spec)
            if pair is None:
                print(f"--exclude {spec!r}: write NODE=REASON", file=sys.stderr)
                return 4
            excludes[pair[0]] = pair[1]
        opts = collect.Options(
            python=parsed.python,
            lane=parsed.lane,
            lanes=lanes,
            device_mode=collect.DeviceMode(parsed.device_mode),
            identity=parsed.identity,
            worker=parsed.worker,
            excludes=excludes,
            pytest_args=pytest_args,
        )
        return collect.main(opts)
    if command == "worker":
        from . import worker

        return worker.main(rest)
    if command == "test":
        from . import scenetest

        return scenetest.main(rest)
    from . import phases

    args = phases.phase_parser(command).parse_args(rest)
    try:
        return phases.run_phase(
            phases.Phase(command),
            args.nodeid,
            args.case,
            args.out,
            args.depfile,
            getattr(args, "fixture", None),
            args.source_digest,
        )
    except phases.UsageError as e:
        print(f"scenerun_pytest {command}: {e}", file=sys.stderr)
        return 4


if __name__ == "__main__":
    sys.exit(main())
