"""What the routing policy reads and returns: a request's features, a view of each variant, a decision.

Plain dataclasses (frozen where they are not built per candidate or per decision) rather than pydantic
models: the ingress builds a handful per request and the policy reads them in its hot path, so construction
and attribute access must cost next to nothing.
The ingress fills them from validated sources (its config, the engines' stats, its own bookkeeping).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from router.latency import LatencyModel


class Reason(StrEnum):
    """Why a request went where it went (or nowhere): short, stable, usable as a metrics label."""

    PINNED = "pinned"
    SLO_MET_BEST_QUALITY = "slo_met_best_quality"
    SLO_MET_LOWEST_COST = "slo_met_lowest_cost"
    # Met elsewhere: the preferred variant was kept for requests that only it can take (router.reservation).
    SLO_MET_AROUND_RESERVATION = "slo_met_around_reservation"
    # No variant is sure to meet the SLO (conservative prediction), this one likely will (mean prediction).
    SLO_LIKELY = "slo_likely"
    DEGRADED_SMALLEST_VIOLATION = "degraded_smallest_violation"
    # Served elsewhere, likely late: the variant that would meet it is kept for tighter requests that it would
    # make miss there (router.reservation.crowded_out).
    YIELDED_TO_RESERVATION = "yielded_to_reservation"
    ROUND_ROBIN = "round_robin"
    LEAST_LOADED = "least_loaded"
    LENGTH_THRESHOLD = "length_threshold"
    LARGEST = "largest"
    PREFIX_AFFINITY = "prefix_affinity"
    WEIGHTED_PREFIX = "weighted_prefix"
    REJECTED_CONTEXT = "rejected_context"  # 400: prompt + max_tokens fits no (or not the pinned) variant
    # 400: the request asks for a sampling field no variant's backend (or not the pinned one's) implements
    REJECTED_UNSUPPORTED_FIELD = "rejected_unsupported_field"
    REJECTED_UNKNOWN_VARIANT = "rejected_unknown_variant"  # 404: pinned to a name no variant has
    REJECTED_UNAVAILABLE = "rejected_unavailable"  # 503: no replica ready (or starting, where allowed)
    REJECTED_OVERLOADED = "rejected_overloaded"  # 429: every candidate's queue is past the request's bound
    REJECTED_SLO = "rejected_slo"  # 429: no candidate predicted to meet the SLO and on_violation=reject
    # 429: no candidate meets the SLO and the queues make the miss hopeless everywhere (router.shedding)
    SHED_HOPELESS = "shed_hopeless"
    # No variant has reported its stats yet (right after a deploy): the ingress's fallback, not the policy's pick
    NO_LIVE_STATS = "no_live_stats"


@dataclass(frozen=True, slots=True)
class SLO:
    """Latency targets of one request; None means no target for that measure."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None


def ttft_budget(target_ms: float, path_ms: float) -> float:
    """What is left of a TTFT target for the part the ingress measures once the path outside it
    (``RouterConfig.ttft_path_ms``) is taken off; never quite 0, so that a target the path alone uses up is
    missed by any prediction."""
    if not path_ms:
        return target_ms
    budget = target_ms - path_ms
    return budget if budget > 1e-3 else 1e-3


@dataclass(frozen=True, slots=True)
class RequestFeatures:
    """What the router knows about a request before it runs (see ``router.headers`` for building one)."""

    prompt_tokens: int
    max_tokens: int
    slo: SLO = field(default_factory=SLO)
    priority: int = 0  # higher may accept longer queues (RouterConfig.queue_bound_per_priority)
    sheddable: bool = False  # rejected first under load (RouterConfig.sheddable_queue_bound_per_replica)
    pinned: str | None = None  # the client named a variant: honour it or reject, never reroute
    # The optional sampling fields it asks for (engines.protocol.SAMPLING_FIELDS): only a variant whose backend
    # implements every one may take it.
    sampling_fields: frozenset[str] = frozenset()


# Not frozen: the ingress builds one per variant per decision and then annotates it with its own load
# (router.inflight.InflightBook.annotate, a dataclasses.replace), and a frozen dataclass's __init__ costs more
# than twice a plain one's (docs/measurements.md): at 16 variants the two builds cost more than the decision on
# them. Treat it as immutable all the same (snapshots share them).
@dataclass(slots=True, kw_only=True)
class VariantView:
    """One variant as the router sees it for one decision: its limits, weights, live load and model.

    Load figures are totals over the variant's ready replicas, as the engines last reported them; the
    ingress adds ``inflight`` (what it sent and has not seen finish), which is fresher than any report.
    """

    name: str
    context_length: int  # prompt + output tokens one sequence may hold
    quality: float  # (0, 1], higher is better
    cost_per_1k_tokens: float
    ready_replicas: int
    max_running_requests: int  # batch slots per replica
    latency: LatencyModel
    # The optional sampling fields its backend implements (EngineConfig.sampling_fields()); None: every one.
    sampling_fields: frozenset[str] | None = None
    starting_replicas: int = 0  # replicas being started (scaling up), not serving yet
    # Beside ready replicas: ms until the starting ones are expected to serve (0.0: no estimate, not counted).
    starting_ready_in_ms: float = 0.0
    queued_requests: int = 0
    running_requests: int = 0
    queued_prompt_tokens: int = 0
    kv_used_fraction: float = 0.0  # the fullest ready replica's KV cache use, 0..1
    inflight: int = 0  # requests this ingress sent to the variant that have not finished
    inflight_prompt_tokens: int = 0  # their prompt tokens
    # The ingress's own tickets, fresher than any report (see router.load for how they are merged):
    report_age_ms: float = 0.0  # how old the engine figures above are
    unstarted_requests: int = 0  # own requests with no first token yet (prefill pending or running)
    unstarted_prompt_tokens: int = 0  # their prompt tokens
    fresh_prompt_tokens: int = 0  # prompt tokens of own unstarted requests sent after the report was taken
    prefill_tokens_per_s: float = 0.0  # prompt tokens this ingress sent the variant per second, recently
    decode_tokens_left: float | None = None  # mean tokens own decoding requests have left (None: unknown)
    decode_tokens_left_sd: float | None = None  # their standard deviation about that mean (None: unknown)
    # The engines' own pace (EngineStats.recent_tpot_ms / recent_decode_batch): the mean time between a running
    # sequence's tokens lately over the ready replicas (0.0: unknown), and the sequences decoding at once
    # meanwhile, summed over them. See router.load.decode_pace.
    recent_tpot_ms: float = 0.0
    recent_decode_batch: float = 0.0
    context_tokens: int = 0  # tokens the ready replicas' running sequences hold in KV, as reported (0: unknown)
    # prompt + max_tokens that every ready replica's longest open request of this ingress reaches, assuming they
    # spread over the replicas (the ready_replicas-th largest; 0: fewer open requests than replicas): whether work
    # that only this variant could take is on each of them (router.reservation.holds_exclusive).
    long_inflight_tokens: int = 0
    # Prompt tokens of this request that the variant's best replica for it holds in its prefix cache
    # (router.prefix_index, router.replica_backlog.best_cached): the prefill the prediction leaves out.
    cached_prompt_tokens: int = 0
    max_cached_tokens: int = 0  # the most of this request's prompt that any of its replicas holds (baselines)


# Not frozen: one is built per candidate variant per decision, and a frozen dataclass's __init__ costs three
# times a plain one's (object.__setattr__ per field). Treat it as immutable all the same.
@dataclass(slots=True)
class Prediction:
    """The latency one variant is predicted to give a request, and whether that meets the request's SLO.

    ``batch_size``, ``queued_tokens_ahead`` and ``waiting_for_slot`` are the load the prediction assumed;
    hand them back to the ``LatencyModel.observe_*`` methods with the measured timings
    (``router.inflight.InflightBook`` does).
    """

    ttft_ms: float
    tpot_ms: float
    meets_slo: bool
    violation: float = 0.0  # sum of relative overshoots of the targets (0 when met)
    batch_size: float = 1.0
    queued_tokens_ahead: float = 0.0
    waiting_for_slot: float = 0.0
    context_tokens: float = 0.0  # KV tokens of the batch it decodes in, its own prompt included (per replica)
    # The conservative figures the SLO was judged on: the predictions inflated by the model's error margin.
    ttft_upper_ms: float = 0.0
    tpot_upper_ms: float = 0.0
    slack: float = 1.0  # smallest relative room left under the (headroom-reduced) targets; < 0 when missed
    # What the TTFT prediction stretched its step-bound work by for the engines' measured pace
    # (LatencyModel.slowdown); handed back to observe_ttft with the outcome.
    slowdown: float = 1.0
    cached_tokens: int = 0  # prompt tokens assumed cached (VariantView.cached_prompt_tokens): not prefilled


@dataclass(frozen=True, slots=True)
class Decision:
    """Where a request goes (``variant``) or why it goes nowhere (``variant`` None: ``reason`` says why, and
    ``router.rejections`` which error that is), and on what grounds.

    ``predictions`` covers the variants that could take the request (fitting, with replicas), so a
    decision can be explained and the model of the chosen variant trained on the outcome.
    """

    variant: str | None
    reason: Reason
    predictions: dict[str, Prediction]
    retry_after_s: float | None = None  # with a rejection for want of capacity (router.rejections.CAPACITY_REASONS)
    detail: str = ""  # a sentence for the client, with a rejection
    param: str | None = None  # the request field a rejection is about (OpenAI's error.param), where there is one

    @property
    def rejected(self) -> bool:
        return self.variant is None


# The state of the capacity reservation (router.reservation), kept here with the rest of RouterState.
Targets = tuple[float | None, float | None]  # (TTFT ms, TPOT ms) of one kind of request

# Weight of the newest exclusive request in the running means: about the last twenty count.
_MEAN_WEIGHT = 0.05


@dataclass(slots=True)
class ExclusiveDemand:
    """What recent requests of one kind (one pair of targets) that only one variant could take looked like."""

    prompt_tokens: float
    last_decision: int  # RouterState.decisions when the latest one was seen

    def add(self, request: RequestFeatures, decision: int) -> None:
        self.prompt_tokens += _MEAN_WEIGHT * (request.prompt_tokens - self.prompt_tokens)
        self.last_decision = decision


@dataclass(slots=True)
class RouterState:
    """The only state the policy keeps between decisions; one per ingress replica."""

    round_robin_next: int = 0
    decisions: int = 0  # routing decisions made so far: the clock of the reservations
    # Per variant, per pair of targets (router.reservation).
    exclusive: dict[str, dict[Targets, ExclusiveDemand]] = field(default_factory=dict)
