"""The engine-load autoscaling policy as Ray Serve runs it, without Ray: a variant's autoscaling config, the figures
each replica reports, and the policy Serve's controller calls (the decision itself is ``router.autoscaling``).

* **Config.** :class:`AutoscalingSpec` (a variant's ``autoscaling:`` section) becomes Serve's
  ``autoscaling_config``; with policy ``engine_load`` it names :class:`EngineLoadPolicy` by its import path
  (:data:`POLICY_PATH`, ``policy_function`` + ``policy_kwargs``).
* **Replica side.** ``EngineDeployment.record_autoscaling_stats()`` returns :func:`engine_metrics`: the engine's load
  figures and the replica's recent TTFT/TPOT (``serve_app.autoscaling.RecentLatency``). Serve calls it every
  ``min(look_back_period_s * 0.2, metrics_interval_s)`` seconds, averages each figure over ``look_back_period_s``
  and pushes it to the controller every ``metrics_interval_s``.
* **Controller side.** Serve instantiates :class:`EngineLoadPolicy` once with the kwargs and calls it every
  control-loop tick with an ``AutoscalingContext``; it turns that into a :class:`~router.autoscaling.ScalingContext`
  and returns what :func:`~router.autoscaling.desired_replicas` decides, held for the upscale delay by the policy
  itself (:func:`~router.autoscaling.held_upscale`: shorter while the SLO breaks; Serve's own upscale delay is then
  0). Serve then applies its downscale delay, scaling factors and min/max bounds to the answer, and starts replicas
  at once when a variant at zero replicas has a request waiting at a handle.

The simulator (``sim.autoscaler``) runs the same functions on simulated figures. Serve pickles this module by value
into its controller, so it imports nothing from Ray (these hooks are alpha in Ray 2.60, hence the pinned version).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any, Literal, Protocol

from pydantic import Field, model_validator

from core.config import StrictModel, raise_if_any
from router.autoscaling import (
    ReplicaLoad,
    ScalingContext,
    ScalingTargets,
    desired_replicas,
    held_upscale,
    scaled_ahead,
    slo_breaking,
)
from router.views import ReplicaFigures

# Serve's own logger: the policy runs in the controller, whose log collects it.
logger = logging.getLogger("ray.serve")

# Serve imports the policy by this path and pickles it into its controller.
POLICY_PATH = f"{__name__}:EngineLoadPolicy"

# The figures a replica reports (Serve wants a flat dict of numbers); 0 latency means "no recent request".
RUNNING = "engine_running_requests"
QUEUED = "engine_queued_requests"
QUEUED_PROMPT_TOKENS = "engine_queued_prompt_tokens"
MAX_RUNNING = "engine_max_running_requests"
KV_USED = "engine_kv_used_fraction"
TTFT_MS = "engine_recent_ttft_ms"
TPOT_MS = "engine_recent_tpot_ms"
QUEUE_WAIT_MS = "engine_queue_wait_ms"
# The same figure on every replica of a variant (the stats board's sum over ingresses): read once, not summed.
REDIRECTED = "variant_redirected_requests"
_LOAD_KEYS = (RUNNING, QUEUED, QUEUED_PROMPT_TOKENS, MAX_RUNNING, KV_USED)


class AutoscalingSpec(StrictModel):
    """Replica autoscaling of one variant, mapped onto Ray Serve's ``AutoscalingConfig``."""

    min_replicas: int = Field(
        1,
        ge=0,
        description="Fewest replicas; 0 allows scaling to zero (then a request waits for a cold start).",
    )
    max_replicas: int = Field(1, ge=1, description="Most replicas; must be >= min_replicas.")
    initial_replicas: int | None = Field(
        None,
        ge=0,
        description="Replicas started at deploy time, within [min_replicas, max_replicas]; None starts min_replicas.",
    )
    target_ongoing_requests: float = Field(
        16.0,
        gt=0,
        description="Requests (running + queued) per replica that Serve scales towards. Ray's default of 2 "
        "suits one-request-at-a-time models; an LLM replica batches many streams, so aim higher.",
    )
    upscale_delay_s: float = Field(
        30.0,
        ge=0,
        description="How long load must stay above target before replicas are added. With policy engine_load "
        "the policy holds this delay itself (Serve's is then 0), so that breaking_upscale_delay_s can replace it.",
    )
    breaking_upscale_delay_s: float = Field(
        0.0,
        ge=0,
        description="engine_load: the upscale delay while the variant already fails its SLO: the router spills or "
        "sheds requests that prefer it, or its busy replicas wait or decode beyond ttft_target_ms / tpot_target_ms. "
        "The delay lets a blip pass; misses happening now are not one, and each second of it is a second more "
        "before new replicas serve. 0 (the default) adds replicas at once then; set it to upscale_delay_s to "
        "wait as Serve does.",
    )
    downscale_delay_s: float = Field(
        600.0,
        ge=0,
        description="How long load must stay below target before replicas are removed. Long by default: "
        "an LLM replica is expensive to start again.",
    )
    downscale_to_zero_delay_s: float | None = Field(
        None,
        ge=0,
        description="With min_replicas 0: how long a variant must be idle before its last replica goes; "
        "None uses downscale_delay_s.",
    )
    policy: Literal["engine_load", "ongoing_requests"] = Field(
        "engine_load",
        description="'engine_load' scales on what the engines report (batch slots in use, queued prefill "
        "tokens, KV cache, recent TTFT/TPOT against the targets below; router/autoscaling.py); "
        "'ongoing_requests' is Serve's default policy (requests per replica vs target_ongoing_requests).",
    )
    target_batch_utilization: float = Field(
        0.75,
        gt=0,
        le=1,
        description="engine_load: share of each replica's batch slots (max_running_requests) that running "
        "plus waiting sequences should fill; more demand adds replicas.",
    )
    target_queued_prompt_tokens: float = Field(
        4096.0,
        gt=0,
        description="engine_load: prompt tokens waiting for prefill that one replica may hold; roughly its "
        "prefill tokens/s times the TTFT you can spend queueing.",
    )
    target_kv_fraction: float = Field(
        0.8, gt=0, le=1, description="engine_load: share of each replica's KV cache that should be in use."
    )
    ttft_target_ms: float | None = Field(
        None,
        gt=0,
        description="engine_load: recent mean TTFT above this (less slo_headroom) on busy replicas adds a "
        "replica; None ignores TTFT.",
    )
    tpot_target_ms: float | None = Field(
        None, gt=0, description="engine_load: the same for time per output token; None ignores TPOT."
    )
    slo_headroom: float = Field(
        0.1, ge=0, lt=1, description="engine_load: fraction of the latency targets kept as margin."
    )
    scale_ahead_s: float = Field(
        0.0,
        ge=0,
        description="engine_load: a predictive term. While demand rises, ask for what it will be this many seconds "
        "ahead (its linear trend over trend_window_s), so that replicas started now are ready when it arrives; "
        "set it to the time a new replica takes to start. 0 (the default) asks for today's demand only.",
    )
    trend_window_s: float = Field(
        10.0, gt=0, description="engine_load: the window over which the demand's trend is fitted (scale_ahead_s)."
    )
    look_back_period_s: float = Field(
        30.0,
        gt=0,
        description="Window over which Serve averages the load figures before each decision: shorter "
        "reacts faster to a spike, longer ignores blips.",
    )
    metrics_interval_s: float | None = Field(
        None,
        gt=0,
        description="How often replicas push their figures to Serve's controller (Serve's own default: "
        "10 s, which delays every decision by up to that much). Deprecated by Ray in favour of an "
        "environment variable it does not read yet in 2.60: setting it logs a DeprecationWarning.",
    )

    @model_validator(mode="after")
    def _bounds(self) -> AutoscalingSpec:
        problems = []
        if self.min_replicas > self.max_replicas:
            problems.append(("min_replicas", f"{self.min_replicas} is above max_replicas ({self.max_replicas})"))
        elif self.initial_replicas is not None and not (
            self.min_replicas <= self.initial_replicas <= self.max_replicas
        ):
            problems.append(
                (
                    "initial_replicas",
                    f"{self.initial_replicas} is outside [min_replicas, max_replicas] = "
                    f"[{self.min_replicas}, {self.max_replicas}]",
                )
            )
        raise_if_any(problems)
        return self

    @property
    def serve_upscale_delay_s(self) -> float:
        """Serve's own upscale delay: 0 under engine_load, which holds ``upscale_delay_s`` itself
        (router.autoscaling.held_upscale) and would otherwise wait it out twice."""
        return 0.0 if self.policy == "engine_load" else self.upscale_delay_s

    def to_serve_autoscaling_config(self) -> dict[str, Any]:
        """Ray Serve's ``autoscaling_config`` (field names of ``ray.serve.config.AutoscalingConfig``)."""
        config: dict[str, Any] = {
            "min_replicas": self.min_replicas,
            "max_replicas": self.max_replicas,
            "target_ongoing_requests": self.target_ongoing_requests,
            "upscale_delay_s": self.serve_upscale_delay_s,
            "downscale_delay_s": self.downscale_delay_s,
        }
        if self.initial_replicas is not None:
            config["initial_replicas"] = self.initial_replicas
        if self.downscale_to_zero_delay_s is not None:
            config["downscale_to_zero_delay_s"] = self.downscale_to_zero_delay_s
        config["look_back_period_s"] = self.look_back_period_s
        if self.metrics_interval_s is not None:
            config["metrics_interval_s"] = self.metrics_interval_s
        if self.policy == "engine_load":
            # A string import path: Serve imports it, pickles it into its controller, and instantiates the
            # class once with policy_kwargs (ray/serve/_private/autoscaling_state.py).
            config["policy"] = {"policy_function": POLICY_PATH, "policy_kwargs": self.policy_targets()}
        return config

    def policy_targets(self) -> dict[str, Any]:
        """The engine_load policy's knobs (``router.autoscaling.ScalingTargets`` keyword arguments)."""
        return {
            "target_batch_utilization": self.target_batch_utilization,
            "target_queued_prompt_tokens": self.target_queued_prompt_tokens,
            "target_kv_fraction": self.target_kv_fraction,
            "ttft_target_ms": self.ttft_target_ms,
            "tpot_target_ms": self.tpot_target_ms,
            "slo_headroom": self.slo_headroom,
            "fallback_target_ongoing_requests": self.target_ongoing_requests,
            "scale_ahead_s": self.scale_ahead_s,
            "trend_window_s": self.trend_window_s,
            "upscale_delay_s": self.upscale_delay_s,
            "breaking_upscale_delay_s": self.breaking_upscale_delay_s,
        }


class LatencySource(Protocol):
    """A replica's recent latency (``serve_app.autoscaling.RecentLatency``; the simulator's replicas give theirs)."""

    def means_ms(self) -> tuple[float | None, float | None]: ...
    def oldest_wait_ms(self) -> float: ...


def engine_metrics(stats: ReplicaFigures, latency: LatencySource, redirected: float = 0.0) -> dict[str, float]:
    """What ``record_autoscaling_stats`` returns: the engine's load and the replica's recent latency.

    TPOT is the engine's own decode pace (``recent_tpot_ms``: every running sequence's token gaps over
    the last seconds) where the engine measures one, else the mean TPOT of the requests that finished
    lately: the pace is live, while a long stream's TPOT arrives only at its end, too late to act on.
    ``redirected``: the requests the ingresses redirected away from this variant (``router.redirect``), as the
    stats board last told this replica.
    """
    ttft_ms, finished_tpot_ms = latency.means_ms()
    tpot_ms = stats.recent_tpot_ms or finished_tpot_ms
    return {
        RUNNING: float(stats.running_requests),
        QUEUED: float(stats.queued_requests),
        QUEUED_PROMPT_TOKENS: float(stats.queued_prompt_tokens),
        MAX_RUNNING: float(stats.max_running_requests),
        KV_USED: stats.kv_used_fraction,
        TTFT_MS: ttft_ms or 0.0,
        TPOT_MS: tpot_ms or 0.0,
        QUEUE_WAIT_MS: latency.oldest_wait_ms(),
        REDIRECTED: float(redirected),
    }


def replica_load(metrics: dict[str, float]) -> ReplicaLoad:
    """One replica's reported figures (as Serve aggregated them) as the policy's :class:`ReplicaLoad`."""
    return ReplicaLoad(
        running_requests=metrics[RUNNING],
        queued_requests=metrics[QUEUED],
        queued_prompt_tokens=metrics[QUEUED_PROMPT_TOKENS],
        max_running_requests=metrics[MAX_RUNNING],
        kv_used_fraction=metrics[KV_USED],
        ttft_ms=metrics.get(TTFT_MS) or None,
        tpot_ms=metrics.get(TPOT_MS) or None,
        queue_wait_ms=metrics.get(QUEUE_WAIT_MS, 0.0),
    )


def scaling_context(ctx: Any) -> ScalingContext:
    """Ray's ``AutoscalingContext`` as the policy's :class:`ScalingContext`.

    Only running replicas that reported every load figure count as reporting; a replica that has just
    started (or whose stats hook failed) is left to the policy, which treats it as idle capacity.
    """
    aggregated = ctx.aggregated_metrics or {}
    loads = []
    redirected = 0.0
    for replica_id in ctx.running_replicas:
        metrics = {name: values[replica_id] for name, values in aggregated.items() if replica_id in values}
        if all(key in metrics for key in _LOAD_KEYS):
            loads.append(replica_load(metrics))
            redirected = max(redirected, metrics.get(REDIRECTED, 0.0))  # relayed by each replica: one figure
    return ScalingContext(
        current_replicas=ctx.current_num_replicas,
        target_replicas=ctx.target_num_replicas,
        min_replicas=ctx.capacity_adjusted_min_replicas,
        max_replicas=ctx.capacity_adjusted_max_replicas,
        replicas=loads,
        handle_queued_requests=float(ctx.total_queued_requests or 0.0),
        ongoing_requests=float(ctx.total_num_requests or 0.0),
        redirected_requests=redirected,
    )


class EngineLoadPolicy:
    """Serve's custom autoscaling policy for a variant: ``policy_kwargs`` are :class:`ScalingTargets`.

    Its state is the recent demand (``(time, replicas asked)`` over ``trend_window_s``) for the predictive
    term (``scale_ahead_s``) and when a pending rise began (the upscale delay it holds in place of Serve's:
    ``held_upscale``); the time is the context's ``current_time`` (Serve's controller clock, or the simulator's).
    """

    def __init__(self, **targets: Any) -> None:
        self.targets = ScalingTargets(**targets)
        self._demand: deque[tuple[float, float]] = deque()
        self._last_asked: int | None = None
        self._rise_since: float | None = None

    def __call__(self, ctx: Any) -> tuple[int, dict[str, Any]]:
        scaling = scaling_context(ctx)
        decision = desired_replicas(scaling, self.targets)
        clock = getattr(ctx, "current_time", None)  # None: a context without Serve's clock
        now = float(time.time() if clock is None else clock)
        if self.targets.scale_ahead_s > 0 and scaling.current_replicas > 0:
            self._demand.append((now, max(decision.by_signal.values(), default=0.0)))
            while self._demand and self._demand[0][0] < now - self.targets.trend_window_s:
                self._demand.popleft()
            decision = scaled_ahead(decision, list(self._demand), scaling, self.targets)
        breaking = slo_breaking(scaling, decision)
        delay_s = self.targets.breaking_upscale_delay_s if breaking else self.targets.upscale_delay_s
        replicas, self._rise_since = held_upscale(
            decision.replicas, scaling.target_replicas, self._rise_since, now, delay_s
        )
        deployment = getattr(ctx, "deployment_name", None)  # None: not Serve's controller (the simulator's context)
        if decision.replicas != self._last_asked and deployment is not None:
            # Serve logs that its target changed, not why: this line in the controller's log says which signal asked
            # (once per change of the ask: the policy runs every control loop, through Serve's delays).
            self._last_asked = decision.replicas
            asks = ", ".join(f"{name} {ask:.2f}" for name, ask in sorted(decision.by_signal.items()))
            logger.info(
                "%s: %d -> %d replicas (%s; asks %s; upscale delay %g s%s)",
                deployment,
                scaling.target_replicas,
                decision.replicas,
                decision.signal,
                asks or "none",
                delay_s,
                ", the SLO breaking" if breaking else "",
            )
        # Serve keeps its delay bookkeeping in the dict it merges this into.
        return replicas, {}
