"""One ingress replica in the simulation: what the serve app's ``RoutingTable`` keeps per ingress replica.

Each real ingress replica routes from its own state (``serve_app/routing.py``): its round-robin turn and
reservations (:class:`~router.RouterState`), its in-flight book (:class:`~router.inflight.InflightBook`: the
requests *it* sent, not the fleet's), the latency models that learn from *its* finished requests, and its own copy
of the stats board's snapshot. With two ingress replicas each sees half the fleet's sends until the next stats
snapshot shows the engines' queues. A simulator that routes every request from one shared book sees more than
the real stack can: least_loaded once measured 7.6 points better simulated than real on the two_variant
fleet, and a round robin in step with a request-index ingress choice sent every 70B request through one
ingress (docs/routing.md).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from router import LatencyModel, LatencyProfile, RouterConfig, RouterState, VariantView
from router.inflight import InflightBook
from router.latency import new_latency_model


@dataclass
class SimIngress:
    """One ingress replica's routing state (see the module docstring)."""

    models: dict[str, LatencyModel]
    book: InflightBook
    state: RouterState = field(default_factory=RouterState)
    snapshot: dict[str, VariantView] = field(default_factory=dict)
    snapshot_s: float = -float("inf")  # when this ingress last refreshed its snapshot
    report_at: dict[str, float] = field(default_factory=dict)  # per variant, its oldest report in the snapshot

    @classmethod
    def fresh(cls, profiles: Iterable[tuple[str, LatencyProfile | None]], router: RouterConfig) -> SimIngress:
        """A newly started ingress: latency models seeded from each variant's profile, nothing in flight."""
        models = {name: new_latency_model(profile, router) for name, profile in profiles}
        return cls(models=models, book=InflightBook(models))


class IngressChoice:
    """Which ingress replica takes each request: one at random.

    The client's connections reach the ingress replicas through HAProxy (leastconn) or Serve's proxy, and a
    keep-alive connection carries requests of any kind, so which replica takes a request is independent of what
    it asks for. Taking them in turn by request index instead couples the choice to anything that alternates by
    index: with round_robin over two variants, one ingress would route every request for one variant.
    """

    def __init__(self, replicas: int, seed: int) -> None:
        self.replicas = replicas
        self._rng = random.Random(f"{seed}:ingress")

    def pick(self) -> int:
        return 0 if self.replicas == 1 else self._rng.randrange(self.replicas)
