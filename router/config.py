"""The router's typed configuration: policy, objective, SLO tiers, admission control, latency profiles.

The serve app embeds :class:`RouterConfig` as its ``router:`` section and may give each variant a
:class:`LatencyProfile`. Like the rest of the project's configs these are strict: an unknown key or an
impossible combination fails at load time with the offending field named.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import Field, StringConstraints, ValidationInfo, field_validator

from core.config import StrictModel

# Tier names travel in an HTTP header (x-slo-tier) and become metric labels: keep them plain.
TIER_NAME_PATTERN = r"^[a-zA-Z0-9][a-zA-Z0-9._-]{0,62}$"
TierName = Annotated[str, StringConstraints(pattern=TIER_NAME_PATTERN)]

Policy = Literal[
    "slo", "round_robin", "least_loaded", "length_threshold", "largest", "prefix_affinity", "weighted_prefix"
]
# What the benches and the simulator compare, by name: every policy, and ``slo_blind``, the slo policy with the
# prefix caches left out (``prefix_routing`` false), as it routed before it could see them.
Setup = Literal[
    "slo",
    "round_robin",
    "least_loaded",
    "length_threshold",
    "largest",
    "prefix_affinity",
    "weighted_prefix",
    "slo_blind",
]
SETUPS: dict[str, dict[str, object]] = {
    **{policy: {"policy": policy} for policy in get_args(Policy)},
    "slo_blind": {"policy": "slo", "prefix_routing": False},
}
Objective = Literal["quality", "cost"]
OnViolation = Literal["degrade", "reject"]
# How a request finds its replica within a variant: the least prompt work queued (serve_app/replica_router.py,
# router.replica_backlog) or Serve's default power of two choices; the simulator models both.
ReplicaChoice = Literal["least_prefill", "power_of_two"]


class LatencyProfile(StrictModel):
    """Measured (or estimated) speed of one variant's replica; seeds its latency model before it learns.

    The defaults are deliberately pessimistic for a GPU replica: an unprofiled variant is assumed slow
    until finished requests show otherwise, so it is not flooded on its first second of traffic.
    """

    prefill_tokens_per_s: float = Field(
        2000.0,
        gt=0,
        description="Prompt tokens one replica prefills per second; sets the prompt-length part of TTFT "
        "and the cost of prefill work queued ahead of a request.",
    )
    base_ttft_ms: float = Field(
        50.0,
        ge=0,
        description="TTFT of a one-token prompt on an idle replica: scheduling, the first decode step and "
        "the trip back to the ingress.",
    )
    tpot_ms_at_batch_1: float = Field(
        50.0, gt=0, description="Milliseconds per output token when the replica decodes one sequence."
    )
    tpot_ms_per_extra_seq: float = Field(
        1.0,
        ge=0,
        description="How much TPOT grows for each further sequence in the running batch.",
    )
    tpot_ms_per_context_token: float = Field(
        0.0,
        ge=0,
        description="How much TPOT grows for each token of context (prompt and output so far) the running "
        "batch holds in its KV cache: every decode step reads, or on some attention kernels attends over, "
        "all of it, so long prompts decoding slow every sequence beside them. 0 until learned.",
    )
    decode_ms_per_prefill_token: float | None = Field(
        None,
        ge=0,
        description="How much one prompt token's prefill lengthens the decode steps it shares, in ms (the TPOT "
        "model's prefill interference); None: as long as its prefill alone, 1000 / prefill_tokens_per_s. "
        "Engines whose mixed prefill-and-decode steps cost more than the two apart need it measured (the "
        "bench's calibration does: a short burst while long prompts arrive).",
    )
    mean_output_tokens: float = Field(
        128.0,
        ge=1,
        description="Tokens a request generates on average; a request waiting for a running slot waits "
        "for running requests to finish, which takes this many decode steps each.",
    )


class SLOTier(StrictModel):
    """A named class of service a client asks for with the ``x-slo-tier`` header."""

    ttft_ms: float | None = Field(
        None, gt=0, description="Target time to first token in milliseconds; None means no TTFT target."
    )
    tpot_ms: float | None = Field(
        None,
        gt=0,
        description="Target time per output token (after the first) in milliseconds; None means none.",
    )
    priority: int = Field(
        0,
        ge=-100,
        le=100,
        description="Default priority of the tier's requests (a request's own priority overrides it); "
        "higher priorities may find longer queues acceptable, see queue_bound_per_priority.",
    )
    sheddable: bool = Field(
        False,
        description="Requests of this tier are shed first under load: they are admitted only while queues "
        "are below sheddable_queue_bound_per_replica.",
    )


def _default_tiers() -> dict[str, SLOTier]:
    return {
        "interactive": SLOTier(ttft_ms=300.0, tpot_ms=50.0, priority=1),
        "standard": SLOTier(ttft_ms=2000.0, tpot_ms=100.0),
        "batch": SLOTier(sheddable=True),
    }


class RouterConfig(StrictModel):
    """How the ingress picks a variant for each request of the public model."""

    policy: Policy = Field(
        "slo",
        description="'slo' picks by predicted latency against each request's SLO; the others are baselines "
        "for comparison: 'round_robin', 'least_loaded' (fewest running+queued per ready replica), "
        "'length_threshold' (short prompts to the smallest-context variant, long ones to the "
        "largest-context one) and 'largest' (highest quality that fits).",
    )
    prefix_routing: bool = Field(
        True,
        description="Route by the engines' prefix caches: predict each variant's TTFT from the prompt tokens its "
        "best replica has not cached, and choose replicas by the prefill ahead of the request there, cached blocks "
        "left out (router/prefix_index.py; docs/routing.md). Off: every prompt is predicted and placed as if "
        "nothing were cached.",
    )
    objective: Objective = Field(
        "quality",
        description="Among variants predicted to meet the SLO: 'quality' takes the highest quality, "
        "'cost' the lowest cost_per_1k_tokens (policy 'slo' only).",
    )
    on_violation: OnViolation = Field(
        "degrade",
        description="When no admissible variant is predicted to meet the SLO: 'degrade' takes the one with "
        "the smallest predicted violation, 'reject' answers 429 with Retry-After (policy 'slo' only).",
    )
    shed_ttft_ratio: float | None = Field(
        1.5,
        gt=1,
        description="Admission control by prediction (policy 'slo', on_violation 'degrade'): a request "
        "predicted to wait so long for its first token that its TTFT would exceed this many times its "
        "target on every variant that could take it, because of the work queued there, is answered 429 "
        "with a Retry-After of when the queue should have room, instead of being served late and "
        "delaying everyone behind it (router/shedding.py). None degrades every request.",
    )
    tiers: dict[TierName, SLOTier] = Field(
        default_factory=_default_tiers,
        min_length=1,
        description="SLO tiers by name (letters, digits, '.', '_', '-'), chosen per request with the "
        "x-slo-tier header; x-slo-ttft-ms / x-slo-tpot-ms override single targets.",
    )
    default_tier: str = Field("standard", description="Tier of a request that names none; must be one of tiers.")
    slo_headroom: float = Field(
        0.1,
        ge=0,
        lt=1,
        description="Fraction of each target kept as margin for prediction error: a variant meets an SLO "
        "only when its predictions are within (1 - slo_headroom) x the targets. Under on_violation 'reject' a "
        "variant merely likely to meet one (its mean prediction, where none is sure) must clear it too.",
    )
    ttft_path_ms: float = Field(
        0.0,
        ge=0,
        description="Milliseconds of a client's time to first token that the ingress's clock does not see: "
        "the way in before the ingress takes the request and the first token's way out after it (the HTTP "
        "proxy, the network, the stream's flush). Every TTFT target is judged less this (the SLO policy's "
        "choice, its reservations), since the latency models learn only what the ingress measures. The "
        "ingress's Server-Timing header gives its own part; a client's TTFT less that is the path.",
    )
    pace_floor: bool = Field(
        True,
        description="Floor each variant's TPOT prediction (with its error margin) at the pace its engines "
        "measured lately (EngineStats.recent_tpot_ms): an engine slower than the model believes is seen at "
        "once. false: the model alone.",
    )
    error_margin_scale: float = Field(
        1.5,
        ge=0,
        description="How many of a variant's learned error margins (the upper quantile of how far outcomes "
        "exceeded its decision-time predictions) to add to its predictions before judging the SLO; 0 "
        "judges on the mean prediction alone.",
    )
    cold_start_margin: float = Field(
        0.5,
        ge=0,
        description="The error margin a variant's latency model is assumed to have before it has seen its own "
        "decision-time errors (a fresh ingress, a new variant): blended out as they come, "
        "cold_start_observations of them weighing as much as the assumption. 0: trust a new model at once.",
    )
    cold_start_observations: float = Field(
        32.0,
        ge=0,
        description="How many of its own decision-time errors a variant's model must see before they weigh as "
        "much as cold_start_margin; 0 turns the assumption off.",
    )
    quality_tolerance: float = Field(
        0.05,
        ge=0,
        le=1,
        description="Objective 'quality': variants meeting the SLO whose quality is within this of the best "
        "one count as equal, and the one with the most room under the SLO takes the request.",
    )
    reserve_slack: float = Field(
        0.2,
        ge=0,
        lt=1,
        description="Capacity reservation (policy 'slo'): a variant that recently was the only one able to "
        "take some requests (by context, or by SLO) is kept for them while a typical such request would "
        "find less than this fraction of its TTFT target free; requests that other variants can serve "
        "within their SLO go there instead. 0 turns reservations off. The default was chosen in the "
        "simulator's heterogeneous scenario: 0.5 cost a quarter of the quality at low load for nothing.",
    )
    reservation_window: int = Field(
        500,
        ge=1,
        description="A reservation lapses when no request needed the variant exclusively within this many "
        "routing decisions.",
    )
    length_threshold_tokens: int = Field(
        1024,
        ge=1,
        description="Policy 'length_threshold': prompts of at most this many tokens go to the "
        "smallest-context variant, longer ones to the largest-context one.",
    )
    queue_bound_per_replica: int = Field(
        32,
        ge=0,
        description="Admission control: a variant takes a request only while the requests waiting for a "
        "running slot per ready replica (this one included) stay within this bound; when no variant "
        "can, the request is answered 429 with Retry-After.",
    )
    sheddable_queue_bound_per_replica: int = Field(
        2,
        ge=0,
        description="The same bound for sheddable requests; lower, so that they are rejected first and "
        "leave queue room for interactive ones. At most queue_bound_per_replica.",
    )
    queue_bound_per_priority: int = Field(
        2,
        ge=0,
        description="Each priority level above 0 adds this much to a request's queue bound and each level "
        "below 0 takes it away (never below 0), so lower-priority requests are rejected first.",
    )
    retry_after_s: float = Field(
        1.0, gt=0, le=3600, description="Retry-After (seconds) sent with a 429 or 503 from the router."
    )
    wait_for_starting_replicas: bool = Field(
        True,
        description="Whether a variant with no ready replica but some starting ones may take requests; "
        "their predicted TTFT then includes replica_startup_ms.",
    )
    replica_startup_ms: float = Field(
        30_000.0,
        ge=0,
        description="Expected time until a starting replica serves, added to its predicted TTFT.",
    )
    kv_full_fraction: float = Field(
        0.95,
        gt=0,
        le=1,
        description="KV cache use at or above which a replica is taken to admit no new sequence until a "
        "running one finishes, whatever its free batch slots.",
    )

    @field_validator("default_tier")
    @classmethod
    def _default_tier_exists(cls, value: str, info: ValidationInfo) -> str:
        tiers = info.data.get("tiers")
        if tiers is not None and value not in tiers:  # None: tiers failed on its own and is reported there
            raise ValueError(f"{value!r} is not one of the tiers ({', '.join(sorted(tiers))})")
        return value

    @field_validator("sheddable_queue_bound_per_replica")
    @classmethod
    def _sheddable_bound_not_above_bound(cls, value: int, info: ValidationInfo) -> int:
        bound = info.data.get("queue_bound_per_replica")
        if bound is not None and value > bound:
            raise ValueError(
                f"{value} is above queue_bound_per_replica ({bound}); sheddable requests must be shed first"
            )
        return value
