"""``python -m sim``: the built-in cluster scenario, ``python -m sim sweep`` (every policy at fractions of the
natural split's capacity, judged by the SLO policy's target), or ``python -m sim calibrate`` against a real run.

    python -m sim --json out.json [--scenario builtin|heterogeneous|tiers|two_variant] [--rate-scale 1]
                  [--out DIR] [--duration-s 3600] [--policies slo largest] [--scaling static]
    python -m sim sweep --scenario two_variant [--fractions 0.5 1.0] [--policies ...] [--json out.json]
                  [--duration-s S]
    python -m sim calibrate --records records.jsonl --profile PROFILE [--replicas N] [--json out.json]
    python -m sim fit --records records.jsonl --profile PROFILE [--replicas N] [--json fitted.json]

PROFILE is a built-in name (``engines.presets.PRESETS``) or a JSON file of an
:class:`~engines.profile.EngineProfile`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import get_args

from engines.presets import PRESETS
from engines.profile import EngineProfile
from router.config import SETUPS, ReplicaChoice
from sim.calibrate import calibrate, render
from sim.fit import FITTED, fit
from sim.scenario import ALL_SCALING, SCENARIOS, run_matrix, table
from sim.sweep import render_sweep, sweep
from traffic.records import read_jsonl
from traffic.routing_results import QUICK_FRACTIONS

COMMANDS = ("run", "calibrate", "sweep", "fit")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sim", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="the built-in scenario: every policy x scaling mode (the default command)")
    run.add_argument("--json", type=Path, default=None, help="write every run's summary and GPU-hours here")
    run.add_argument("--out", type=Path, default=None, help="also write each run as the bench does (plots)")
    run.add_argument(
        "--scenario",
        choices=sorted(SCENARIOS),
        default="builtin",
        help="builtin: 64 H200s, 1 h with a 5x spike (docs/sim.md); heterogeneous: 24 H200s whose variants "
        "hold different contexts, steady traffic (router.reservation's case); tiers: 18 H200s whose variants "
        "decode at different speeds, chat at two SLO tiers; two_variant: the routing bench's short/long mix on "
        "18 H200s",
    )
    run.add_argument("--duration-s", type=float, default=None, help="default: the scenario's own")
    run.add_argument("--rate-scale", type=float, default=1.0, help="multiply every stream's rate")
    run.add_argument("--policies", nargs="+", choices=list(SETUPS), default=None, help="default: the scenario's")
    run.add_argument("--scaling", nargs="+", choices=ALL_SCALING, default=None, help="default: the scenario's")
    run.add_argument(
        "--replica-choice",
        choices=get_args(ReplicaChoice),
        default=None,
        help="replica choice within a variant: Serve's default, or the least queued prompt work (the app's "
        "default); default: the scenario's (tiers: least_prefill, the others: power_of_two)",
    )
    run.add_argument("--workers", type=int, default=None, help="processes (default: one per CPU)")

    sw = sub.add_parser(
        "sweep",
        help="the routing bench's quick sweep: the natural split's capacity from the engine models, then every "
        "policy at fractions of it, and the SLO policy's target at the top rate",
    )
    sw.add_argument("--scenario", choices=sorted(SCENARIOS), default="two_variant")
    sw.add_argument(
        "--fractions",
        nargs="+",
        type=float,
        default=list(QUICK_FRACTIONS),
        help="rates as fractions of the capacity (the bench's quick sweep: 0.5 1.0); the target is judged at the top",
    )
    sw.add_argument("--policies", nargs="+", choices=list(SETUPS), default=None, help="default: the scenario's")
    sw.add_argument(
        "--duration-s", type=float, default=None, help="seconds of traffic per run; default: the scenario's"
    )
    sw.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="also run the sweep on N-1 reseeded draws of the traffic and report attainment and the target over all N",
    )
    sw.add_argument(
        "--prefix-view",
        choices=["reported", "oracle"],
        default="reported",
        help="what the router knows of the prefix caches: the replicas' reports (as the serve app), or every cache "
        "as it is at each decision (the oracle the index is judged against)",
    )
    sw.add_argument(
        "--fleet-scale",
        type=float,
        default=1.0,
        help="every pool's replicas and the traffic scaled together (4: a fleet four times the scenario's at four "
        "times its rate)",
    )
    sw.add_argument("--json", type=Path, default=None, help="write the capacity estimate, the runs and the target here")
    sw.add_argument("--workers", type=int, default=None, help="processes (default: one per CPU)")

    cal = sub.add_parser("calibrate", help="replay a bench run's records; simulated vs measured percentiles")
    cal.add_argument("--records", type=Path, required=True, help="records.jsonl of a `python -m bench load` run")
    cal.add_argument("--profile", required=True, help="a built-in profile name or an EngineProfile JSON file")
    cal.add_argument("--replicas", type=int, default=1, help="replicas the real run had")
    cal.add_argument("--max-ongoing-requests", type=int, default=None)
    cal.add_argument("--json", type=Path, default=None)

    fit_p = sub.add_parser(
        "fit", help="fit a profile's step model to a bench run's records (the simulator replays them); prints it"
    )
    fit_p.add_argument("--records", type=Path, required=True, help="records.jsonl of a `python -m bench load` run")
    fit_p.add_argument("--profile", required=True, help="the start: a preset name or an EngineProfile JSON file")
    fit_p.add_argument("--replicas", type=int, default=1, help="replicas the real run had")
    fit_p.add_argument(
        "--keep",
        action="append",
        default=[],
        choices=FITTED,
        help="a figure to keep as the start profile has it (repeatable), e.g. overhead_ms at the stack's own",
    )
    fit_p.add_argument("--json", type=Path, default=None, help="write the fitted EngineProfile here")
    return parser


def load_profile(text: str) -> EngineProfile:
    if text in PRESETS:
        return PRESETS[text]
    return EngineProfile.model_validate_json(Path(text).read_text())


def _run(args: argparse.Namespace) -> int:
    make = SCENARIOS[args.scenario]
    scenario = make(rate_scale=args.rate_scale) if args.duration_s is None else make(args.duration_s, args.rate_scale)
    scenario = scenario.model_copy(
        update={
            "policies": args.policies or scenario.policies,
            "scaling": args.scaling or scenario.scaling,
            "replica_choice": args.replica_choice or scenario.replica_choice,
        }
    )
    started = time.perf_counter()
    runs = run_matrix(scenario, workers=args.workers, out=args.out)
    wall = time.perf_counter() - started
    print(f"# {scenario.name}\n")
    print(table(runs))
    cpu = sum(r.cpu_s for r in runs)
    print(f"\n{len(runs)} runs simulated in {wall:.1f} s wall ({cpu:.1f} CPU-seconds over all runs)")
    if args.json is not None:
        payload = {
            "scenario": scenario.model_dump(mode="json"),
            "wall_s": wall,
            "runs": [r.model_dump(mode="json") for r in runs],
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


def _sweep(args: argparse.Namespace) -> int:
    if any(f <= 0 for f in args.fractions) or args.fleet_scale <= 0:
        print("sim sweep: fractions and the fleet scale must be positive", file=sys.stderr)
        return 2
    try:
        result = sweep(
            SCENARIOS[args.scenario],
            fractions=sorted(args.fractions),
            policies=args.policies,
            duration_s=args.duration_s,
            seeds=args.seeds,
            workers=args.workers,
            prefix_view=args.prefix_view,
            fleet_scale=args.fleet_scale,
        )
    except ValueError as exc:  # e.g. a stream whose typical request no pool holds: no natural split
        print(f"sim sweep: scenario {args.scenario!r}: {exc}", file=sys.stderr)
        return 2
    print(render_sweep(result))
    print(f"\n{len(result.runs)} runs and the estimate in {result.wall_s:.1f} s wall")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(result.model_dump_json(indent=2) + "\n")
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    try:
        profile = load_profile(args.profile)
        result = calibrate(
            read_jsonl(args.records), profile, replicas=args.replicas, max_ongoing_requests=args.max_ongoing_requests
        )
    except (OSError, ValueError) as exc:
        print(f"sim calibrate: {exc}", file=sys.stderr)
        return 2
    print(render(result))
    if args.json is not None:
        args.json.write_text(result.model_dump_json(indent=2) + "\n")
    return 0


def _fit(args: argparse.Namespace) -> int:
    try:
        result = fit(read_jsonl(args.records), load_profile(args.profile), replicas=args.replicas, keep=args.keep)
    except (OSError, ValueError) as exc:
        print(f"sim fit: {exc}", file=sys.stderr)
        return 2
    figures = {name: round(getattr(result.profile, name), 3) for name in FITTED}
    print(f"fitted after {result.replays} replays, RMS log error {result.error:.3f}: {json.dumps(figures)}")
    print(render(result.calibration))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(result.profile.model_dump_json(indent=2) + "\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in (*COMMANDS, "-h", "--help"):
        argv = ["run", *argv]  # `python -m sim --json out.json` runs the built-in scenario
    args = build_parser().parse_args(argv)
    commands = {"run": _run, "sweep": _sweep, "calibrate": _calibrate, "fit": _fit}
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
