"""One simulated request: what it asks for, and the times the simulation stamps on it as it runs."""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import ServingError
from router import Prediction, RequestFeatures
from router.inflight import RouteTicket
from traffic.workload import Slo


@dataclass(slots=True, eq=False)
class SimRequest:
    """A request from arrival at the ingress to its last token. Times are simulated seconds.

    Outputs run to ``max_tokens`` (the bench sends ``ignore_eos``), so the decode length is known.
    """

    index: int
    arrival_s: float
    prompt_tokens: int
    max_tokens: int
    slo: Slo  # the bench's SLO: the tier name sent and the targets the run is scored against
    features: RequestFeatures  # what the router sees
    ingress: int = 0  # which ingress replica took it (its handle's view picks the replica: sim/deployment.py)
    variant: str | None = None
    replica: str | None = None  # the replica its handle sent it to (x-route-replica)
    prediction: Prediction | None = None
    dispatched_s: float | None = None  # handed to a replica's engine
    remaining_prefill: int = 0
    first_token_s: float | None = None
    end_s: float | None = None
    rejection: type[ServingError] | None = None  # the router refused it: the error the ingress would answer
    route_reason: str | None = None  # the decision's reason, as x-route-reason carries it
    candidates: str | None = None  # every candidate the decision weighed, as x-route-candidates carries it
    ticket: RouteTicket | None = None  # the ingress's booking (router.inflight), from dispatch to close

    @property
    def kv_tokens(self) -> int:
        """The KV cache a running sequence reserves: its whole context."""
        return self.prompt_tokens + self.max_tokens
