"""route() of two versions of router/policy.py, interleaved in one process on the thread's CPU clock (issue #24).

    PYTHONPATH=. python results/routing-fleet/cpu/route-cost-s10/ab.py OLD_REV [ROUNDS]

Loads ``git show OLD_REV:router/policy.py`` as a module beside the working tree's ``router.policy`` and times
both on the same 16-variant fleet and requests as ``python -m bench route-cost`` (20,000 decisions a round),
alternating which goes first; prints each round's p50 and p99 in us.
"""

from __future__ import annotations

import importlib.util
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import router.policy as new
from bench.route_cost import _p99, fleet, requests
from router import RouterConfig, RouterState


def main(old_rev: str, rounds: int) -> None:
    source = subprocess.run(["git", "show", f"{old_rev}:router/policy.py"], check=True, capture_output=True).stdout
    path = Path(tempfile.mkdtemp()) / "policy_old.py"
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location("policy_old", path)
    assert spec is not None and spec.loader is not None
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    rng = random.Random("0:16")
    views = fleet(16, rng)
    config = RouterConfig(policy="slo")
    batch = requests(rng, 20_000)
    results: dict[str, list[tuple[float, float]]] = {"old": [], "new": []}
    clock = time.thread_time_ns
    for i in range(rounds):
        order = [("old", old), ("new", new)] if i % 2 == 0 else [("new", new), ("old", old)]
        for name, module in order:
            state = RouterState()
            for r in batch[:300]:
                module.route(r, views, config, state)
            times = []
            for r in batch:
                started = clock()
                module.route(r, views, config, state)
                times.append((clock() - started) / 1000.0)
            times.sort()
            results[name].append((statistics.median(times), _p99(times)))
    for name, rows in results.items():
        print(name, "p50", [round(a, 1) for a, _ in rows], "p99", [round(b, 1) for _, b in rows])


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 6)
