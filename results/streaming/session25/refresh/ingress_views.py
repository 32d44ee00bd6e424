"""Which part of an ingress's private view costs routing precision with several ingress replicas (session 25).

With two ingress replicas the simulator keeps each ingress's routing state apart, as the real stack does
(sim/ingress.py: its latency models, its in-flight book and router state; sim/deployment.py: its handle's per-replica
backlog). This shares one piece at a time across the ingresses and runs slo at the two_variant fleet's capacity:

    PYTHONPATH=.:results/routing-fleet/sim-drift-s15 python results/streaming/session25/refresh/ingress_views.py \
        [duration_s] [seeds] [ingress_replicas]
"""

from __future__ import annotations

import sys

import capacity  # session 15's shared fleet run (results/routing-fleet/sim-drift-s15 on the path)

from router.inflight import InflightBook
from sim.ingress import SimIngress
from sim.simulator import Simulation


def sharing(models: bool = False, book: bool = False, handle: bool = False) -> type[Simulation]:
    class Shared(Simulation):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            first = self.ingresses[0]
            if book:  # the whole routing state: in-flight book, latency models, router state, snapshot
                self.ingresses = [first] * len(self.ingresses)
            elif models:  # only what the latency models learn
                self.ingresses = [
                    SimIngress(models=first.models, book=InflightBook(first.models)) for _ in self.ingresses
                ]
            if handle:  # the handles' per-replica backlog (least_prefill's view)
                for deployment in self.deployments.values():
                    deployment._sent = [deployment._sent[0]] * len(deployment._sent)

    return Shared


CASES = {
    "apart (as the stack)": sharing(),
    "models shared": sharing(models=True),
    "book+models+state shared": sharing(book=True),
    "handle backlog shared": sharing(handle=True),
    "all shared": sharing(book=True, handle=True),
}


def main() -> None:
    duration_s = float(sys.argv[1]) if len(sys.argv) > 1 else 150.0
    seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    ingress_replicas = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    plain, _ = capacity.run(Simulation, "slo", duration_s, seed=0)
    print(f"one ingress, seed 0: {capacity.summary(plain)}")
    for name, kind in CASES.items():
        rows = [
            capacity.summary(capacity.run(kind, "slo", duration_s, seed=s, ingress_replicas=ingress_replicas)[0])
            for s in range(seeds)
        ]
        print(f"{ingress_replicas} ingresses, {name}: " + " | ".join(rows), flush=True)


if __name__ == "__main__":
    main()
