"""``python -m bench SUBCOMMAND ...``: the bench command line.

Each subcommand is a module exposing ``add_parser(subparsers)`` (which adds its subparser(s) with
``subparsers.add_parser(NAME, ...)``; a return value is not needed) and ``run(args) -> int`` (the exit
status). Registering one is one line in ``SUBCOMMANDS``. A module
that fails to import fails the command loudly: a silently missing subcommand would hide a broken
install. Keep heavy imports (torch, ray) inside ``run`` so ``--help`` and other subcommands stay fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

SUBCOMMANDS: tuple[str, ...] = (
    "bench.load",
    "bench.engine_bench",
    "bench.overhead",
    "bench.spike",
    "bench.routing",
    "bench.route_cost",
    "bench.soak",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description="Load generation and benchmarks.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMANDS:
        module = importlib.import_module(name)
        before = set(subparsers.choices)
        module.add_parser(subparsers)
        added = set(subparsers.choices) - before
        if not added:
            raise RuntimeError(f"{name}.add_parser added no subcommand")
        for command in added:
            subparsers.choices[command].set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # for reports that quote the command
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
