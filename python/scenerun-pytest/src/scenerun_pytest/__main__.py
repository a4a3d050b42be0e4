"""``python -m scenerun_pytest collect|fixture|golden``; see docs/pytest.md."""

from __future__ import annotations

import argparse
import sys


def _parser():
    p = argparse.ArgumentParser(prog="python -m scenerun_pytest")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="print the scenes of the scene tests under PATHS (JSON)")
    c.add_argument("paths", nargs="+")
    c.add_argument("--platform", default=None, help="keep cases whose `platforms` include it")
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
    for phase in ("fixture", "golden"):
        f = sub.add_parser(phase, help=f"compute one case's {phase}")
        f.add_argument("nodeid", help="PATH::Class")
        f.add_argument("--case", required=True)
        f.add_argument("--out", required=True)
        f.add_argument("--depfile", default=None)
        if phase == "golden":
            f.add_argument("--fixture", required=True)
    return p


def main(argv=None) -> int:
    opts = _parser().parse_args(argv)
    if opts.command == "collect":
        from . import collect

        lanes = {}
        for spec in opts.lane_for:
            n, _, name = spec.partition("=")
            if not n.isdigit() or not name:
                print(f"--lane-for {spec!r}: write N=LANE", file=sys.stderr)
                return 4
            lanes[int(n)] = name
        opts.lanes = lanes
        return collect.main(opts)
    from . import phases

    try:
        phases.run_phase(
            opts.command, opts.nodeid, opts.case, opts.out, opts.depfile, getattr(opts, "fixture", None)
        )
    except phases.UsageError as e:
        print(f"scenerun_pytest {opts.command}: {e}", file=sys.stderr)
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main())
