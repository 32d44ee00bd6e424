"""Ray Serve glue for the engine-load autoscaling policy (the decision itself is ``router.autoscaling``).

Two halves, one per side of Serve's autoscaling loop (Ray 2.60; these hooks are alpha there, hence
the pinned Ray version):

* **Replica side.** ``EngineDeployment.record_autoscaling_stats()`` returns :func:`engine_metrics`:
  the engine's load figures and the replica's recent TTFT/TPOT (:class:`RecentLatency`). Serve calls
  it every ``min(look_back_period_s * 0.2, metrics_interval_s)`` seconds, averages each figure over
  ``look_back_period_s`` and pushes it to the controller every ``metrics_interval_s``.
* **Controller side.** :class:`EngineLoadPolicy` is named in the deployment's
  ``autoscaling_config.policy`` (``policy_function`` + ``policy_kwargs``, see
  ``AutoscalingSpec.to_serve_autoscaling_config``). Serve instantiates it once with the kwargs and
  calls it every control-loop tick with an ``AutoscalingContext``; it turns that into a
  :class:`~router.autoscaling.ScalingContext` and returns what
  :func:`~router.autoscaling.desired_replicas` decides, held for the upscale delay by the policy itself
  (:func:`~router.autoscaling.held_upscale`: shorter while the SLO breaks; Serve's own upscale delay is
  then 0). Serve then applies its downscale delay, scaling factors and min/max bounds to the answer, and
  starts replicas at once when a variant at zero replicas has a request waiting at a handle.

Serve pickles this module by value into its controller, so it imports nothing from Ray at module
level and keeps its own helpers small.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

from engines.protocol import Delta, EngineStats
from router.autoscaling import (
    ReplicaLoad,
    ScalingContext,
    ScalingTargets,
    desired_replicas,
    held_upscale,
    scaled_ahead,
    slo_breaking,
)

# Serve's own logger: the policy runs in the controller, whose log collects it.
logger = logging.getLogger("ray.serve")

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


class RecentLatency:
    """Mean TTFT and TPOT of the requests a replica served in the last ``window_s`` seconds, and how long
    the oldest request still without a first token has waited.

    Old samples drop out, so a replica that went idle after a slow spell stops reporting the slowness
    (which would otherwise hold the variant scaled up). The waiting requests are what make the signal
    early: TTFT is known only once a first token comes, while a request stuck in an overloaded queue
    reports its wait on every sample. Cheap: one deque append per request event, one dict entry per
    request until its first token.
    """

    def __init__(self, window_s: float = 10.0, clock=time.monotonic) -> None:
        self.window_s = window_s
        self._clock = clock
        self._ttft: deque[tuple[float, float]] = deque()
        self._tpot: deque[tuple[float, float]] = deque()
        self._waiting: dict[str, float] = {}  # request id -> when the replica received it (insertion order)

    def started(self, request_id: str) -> None:
        """The replica received ``request_id``; it waits until its first token or its end."""
        self._waiting[request_id] = self._clock()

    def first_token(self, request_id: str) -> None:
        """``request_id`` has its first token (or ended without one): it no longer waits."""
        self._waiting.pop(request_id, None)

    def oldest_wait_ms(self) -> float:
        """Ms the oldest request still without a first token has waited; 0.0 when none waits."""
        oldest = next(iter(self._waiting.values()), None)  # dicts keep insertion order: the first is the oldest
        return 0.0 if oldest is None else max(0.0, self._clock() - oldest) * 1e3

    def observe(self, delta: Delta) -> None:
        """Takes a request's TTFT from its first delta that carries tokens and its TPOT from its last."""
        if delta.first_token_time is None:
            return
        now = self._clock()
        first = bool(delta.token_ids) and delta.completion_tokens == len(delta.token_ids)
        if first and delta.arrival_time is not None:
            self._ttft.append((now, max(0.0, delta.first_token_time - delta.arrival_time) * 1e3))
        if delta.finish_reason is not None and delta.completion_tokens > 1:
            decode_s = time.time() - delta.first_token_time
            self._tpot.append((now, max(0.0, decode_s) * 1e3 / (delta.completion_tokens - 1)))

    def means_ms(self) -> tuple[float | None, float | None]:
        """(TTFT, TPOT) in ms over the window; None where no sample is recent enough."""
        horizon = self._clock() - self.window_s
        out: list[float | None] = []
        for samples in (self._ttft, self._tpot):
            while samples and samples[0][0] < horizon:
                samples.popleft()
            out.append(sum(v for _, v in samples) / len(samples) if samples else None)
        return out[0], out[1]


def engine_metrics(stats: EngineStats, latency: RecentLatency, redirected: float = 0.0) -> dict[str, float]:
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


POLICY_PATH = f"{__name__}:{EngineLoadPolicy.__name__}"
