"""The redirect check's second decision per request: route() on redirect.idle's views with a fresh state (what
router.redirect.preferred_variant does now) against router.policy.route_idle (the same Decision), interleaved."""

import random
import statistics
import time

from bench.route_cost import fleet, requests
from router import RouterConfig, RouterState, route
from router.policy import route_idle
from router.redirect import idle


def percentiles(ordered: list[float]) -> str:
    return f"{statistics.median(ordered):.1f} / {ordered[int(0.99 * (len(ordered) - 1))]:.1f}"


def main() -> None:
    clock = time.perf_counter_ns
    for n in (2, 8, 16):
        rng = random.Random(f"0:{n}")
        views = fleet(n, rng)
        config = RouterConfig(policy="slo")
        batch = requests(rng, 10000)
        now, new = [], []
        for r in batch:
            t0 = clock()
            route(r, [idle(v) for v in views], config, RouterState())
            t1 = clock()
            route_idle(r, views, config)
            t2 = clock()
            now.append((t1 - t0) / 1000)
            new.append((t2 - t1) / 1000)
        print(f"| {n} | {len(batch)} | {percentiles(sorted(now))} | {percentiles(sorted(new))} |")


if __name__ == "__main__":
    main()
