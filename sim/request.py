"""One simulated request: what it asks for, and the times the simulation stamps on it as it runs."""

from __future__ import annotations

from dataclasses import dataclass, field

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
    # The prompt's content as (segment_id, tokens) pieces (traffic.segments): what names its KV cache blocks
    # (traffic.segments.segment_block_hashes). Empty when the workload shares no prefixes.
    segments: tuple[tuple[int, int], ...] = ()
    turn: int = 0  # the turn of its conversation (traffic.prefix.Conversations); 0 outside conversations
    # Its prompt's KV blocks at its variant's block size (engines/kv_blocks.py), what the replica's prefix cache
    # (engines/prefix_cache.py, through the shared batch) matches and stores; and what that cache supplied.
    block_hashes: list[int] = field(default_factory=list)
    cached_tokens: int = 0
    held_blocks: int = 0
    # Per replica of the chosen variant that holds any of the prompt, its cached tokens as the ingress's index saw
    # them (GenerationRequest.cached_by_replica): what the handle's replica choice weighs.
    cached_by_replica: dict[str, int] = field(default_factory=dict)

    @property
    def kv_tokens(self) -> int:
        """The KV cache a running sequence reserves: its whole context."""
        return self.prompt_tokens + self.max_tokens
