"""The replica autoscaling policy: how many replicas a variant wants, from its engines' real load.

Pure Python (no Ray): ``router.serve_autoscaling`` turns Ray Serve's ``AutoscalingContext`` into a
:class:`ScalingContext` and calls :func:`desired_replicas` on every tick of Serve's control loop; the
simulator calls the same function. Serve wraps the answer with its own upscale/downscale delays,
scaling factors and min/max bounds, so this function only says *how many replicas the load asks for
now* and keeps no state.

Counting requests alone (Serve's default, ``target_ongoing_requests``) is a poor signal for an LLM
replica (ray-project/ray-llm#133): one replica batches dozens of streams, a long prompt costs as
much prefill as many short ones, and a replica can run out of KV cache with batch slots to spare.
So each signal below estimates the fleet size at which that resource sits at its target, and the
largest wins:

* **slots**: sequences running or waiting (in engines and at Serve's handles), plus the requests the
  router redirected away from this variant that would still be running here (``router.redirect``:
  spilled to another variant or shed while this one was full), over the batch slots one replica
  should keep busy (``max_running_requests x target_batch_utilization``);
* **prefill**: prompt tokens waiting for prefill over what one replica may have queued;
* **kv**: the KV cache in use over the share of it one replica should fill;
* **slo**: replicas whose requests wait, or recently waited, beyond the TTFT target (less headroom), or
  whose engines decode slower than the TPOT target, while busy, ask for one replica more; latency tells
  *that* more are needed, not how many. Two of its inputs are live rather than after the fact: the age
  of the oldest request still waiting for its first token (queue wait: it grows from the first second of
  an overload, long before the requests behind it finish) and the engine's own decode pace
  (``EngineStats.recent_tpot_ms``: every running sequence's token gaps over the last seconds, not the
  mean TPOT of requests that finished, which a 30 s stream reports only when it ends);
* **ongoing**: with no engine report at all (replicas just started, or stats disabled), Serve's
  own ongoing-request count over ``fallback_target_ongoing_requests``.

Every signal is an absolute demand, never a ratio of the current size, so replicas that are still
starting are not counted twice: the answer is the same whether or not they have arrived.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

# Keeps float noise (demand 8.000001 over capacity 4) from asking for one replica more.
_EPSILON = 1e-6


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    """One running replica's engine load, as it reported it (averaged over Serve's look-back window)."""

    running_requests: float = 0.0  # sequences decoding, holding KV cache
    queued_requests: float = 0.0  # accepted by the engine, not yet running
    queued_prompt_tokens: float = 0.0  # prefill work waiting
    max_running_requests: float = 0.0  # batch slots; 0 when the engine does not say
    kv_used_fraction: float = 0.0  # 0..1
    ttft_ms: float | None = None  # recent time to first token; None when no request started recently
    tpot_ms: float | None = None  # the engine's recent decode pace (or finished requests' TPOT); None: no data
    queue_wait_ms: float = 0.0  # age of the oldest request still waiting for its first token; 0: none waits


@dataclass(frozen=True, slots=True)
class ScalingContext:
    """What one scaling decision sees for one variant."""

    current_replicas: int  # running replicas
    target_replicas: int  # the autoscaler's current target (running + starting)
    min_replicas: int
    max_replicas: int
    replicas: Sequence[ReplicaLoad] = ()  # the running replicas that reported engine load
    handle_queued_requests: float = 0.0  # waiting at Serve handles, not yet sent to any replica
    ongoing_requests: float = 0.0  # Serve's own count: running at replicas + queued at handles
    # Requests that preferred this variant but were spilled or shed, counted as if running here (router.redirect):
    # the demand the router hid from this variant's own engines while it was full.
    redirected_requests: float = 0.0


@dataclass(frozen=True, slots=True)
class ScalingTargets:
    """What the policy aims for on each replica; the knobs of ``AutoscalingSpec`` with policy engine_load."""

    target_batch_utilization: float = 0.75
    target_queued_prompt_tokens: float = 4096.0
    target_kv_fraction: float = 0.8
    ttft_target_ms: float | None = None
    tpot_target_ms: float | None = None
    slo_headroom: float = 0.1
    fallback_target_ongoing_requests: float = 16.0
    scale_ahead_s: float = 0.0  # predictive term: ask for the demand this far ahead while it rises (0: off)
    trend_window_s: float = 10.0  # the window its trend is fitted over
    # How long an ask above the current target must hold before it is answered (Serve's upscale delay, held by the
    # policy so that it can be shorter while the variant fails its SLO: held_upscale); 0: at once.
    upscale_delay_s: float = 0.0
    breaking_upscale_delay_s: float = 0.0

    def __post_init__(self) -> None:
        problems = []
        if not 0 < self.target_batch_utilization <= 1:
            problems.append(f"target_batch_utilization must be in (0, 1], got {self.target_batch_utilization}")
        if not 0 < self.target_kv_fraction <= 1:
            problems.append(f"target_kv_fraction must be in (0, 1], got {self.target_kv_fraction}")
        if not 0 <= self.slo_headroom < 1:
            problems.append(f"slo_headroom must be in [0, 1), got {self.slo_headroom}")
        for name in ("scale_ahead_s", "upscale_delay_s", "breaking_upscale_delay_s"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("target_queued_prompt_tokens", "fallback_target_ongoing_requests", "trend_window_s"):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("ttft_target_ms", "tpot_target_ms"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                problems.append(f"{name} must be > 0 or None, got {value}")
        if problems:
            raise ValueError("; ".join(problems))


@dataclass(frozen=True, slots=True)
class ScalingDecision:
    """The replicas wanted (within min/max), the signal that asked for the most, and every signal's ask."""

    replicas: int
    signal: str  # which signal decided: 'slots', 'prefill', 'kv', 'slo', 'ongoing' or 'idle'
    by_signal: Mapping[str, float] = field(default_factory=dict)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _waited_ms(replica: ReplicaLoad) -> float | None:
    """What the replica's requests wait for a first token: the recent TTFT, or longer when one waits now."""
    if replica.ttft_ms is None and replica.queue_wait_ms <= 0:
        return None
    return max(replica.ttft_ms or 0.0, replica.queue_wait_ms)


def _slo_missed(replicas: Sequence[ReplicaLoad], targets: ScalingTargets) -> bool:
    """Whether the replicas' mean wait for a first token or decode pace is beyond its target less the headroom."""
    budget = 1.0 - targets.slo_headroom
    waits = [w for w in map(_waited_ms, replicas) if w is not None]
    for target, values in (
        (targets.ttft_target_ms, waits),
        (targets.tpot_target_ms, [r.tpot_ms for r in replicas if r.tpot_ms is not None]),
    ):
        if target is not None and values and _mean(values) > target * budget:
            return True
    return False


def demand_by_signal(ctx: ScalingContext, targets: ScalingTargets) -> dict[str, float]:
    """Replicas (fractional) each signal asks for; signals without data are left out."""
    reports = list(ctx.replicas)
    asks: dict[str, float] = {}
    if ctx.ongoing_requests > 0:
        asks["ongoing"] = ctx.ongoing_requests / targets.fallback_target_ongoing_requests
    if not reports:
        return asks
    # Replicas that run but have not reported yet (just started) are idle ones of the same kind.
    slots = _mean([r.max_running_requests for r in reports if r.max_running_requests > 0])
    engine_sequences = sum(r.running_requests + r.queued_requests for r in reports)
    # Serve's count and the engines' reports arrive on different schedules: take whichever sees more.
    sequences = max(engine_sequences + ctx.handle_queued_requests, ctx.ongoing_requests) + ctx.redirected_requests
    if slots > 0:
        asks["slots"] = sequences / (slots * targets.target_batch_utilization)
        asks.pop("ongoing", None)  # the slot count is the same demand, measured better
    asks["prefill"] = sum(r.queued_prompt_tokens for r in reports) / targets.target_queued_prompt_tokens
    asks["kv"] = sum(r.kv_used_fraction for r in reports) / targets.target_kv_fraction
    # More replicas only cure a latency miss that comes from sharing a replica: an idle replica that is
    # too slow for the SLO stays too slow, and scaling out for it would pin the variant at max_replicas.
    busy = (
        sequences > 0.5 * ctx.current_replicas * max(slots, 1.0)
        or ctx.handle_queued_requests > 0
        or ctx.redirected_requests > 0
    )
    if busy and _slo_missed(reports, targets):
        asks["slo"] = ctx.current_replicas + 1.0
    return asks


def desired_replicas(ctx: ScalingContext, targets: ScalingTargets) -> ScalingDecision:
    """How many replicas the variant's load asks for now, within ``[min_replicas, max_replicas]``."""
    if ctx.current_replicas == 0:
        # Nothing runs, so nothing reports: keep the target (Serve starts a replica on its own as soon
        # as a request waits at a handle; see Serve's cold-start path).
        replicas = min(max(ctx.target_replicas, ctx.min_replicas), ctx.max_replicas)
        return ScalingDecision(replicas=replicas, signal="idle")
    asks = demand_by_signal(ctx, targets)
    signal, ask = max(asks.items(), key=lambda item: item[1], default=("idle", 0.0))
    if ask <= _EPSILON:
        signal = "idle"
    wanted = math.ceil(ask - _EPSILON)
    replicas = min(max(wanted, ctx.min_replicas), ctx.max_replicas)
    return ScalingDecision(replicas=replicas, signal=signal, by_signal=asks)


def rising_trend(history: Sequence[tuple[float, float]]) -> float:
    """The least-squares slope (replicas per second) of ``(time, demand)`` points; 0 when flat or falling."""
    if len(history) < 3:
        return 0.0
    mean_t = sum(t for t, _ in history) / len(history)
    mean_d = sum(d for _, d in history) / len(history)
    spread = sum((t - mean_t) ** 2 for t, _ in history)
    if spread <= 0:
        return 0.0
    slope = sum((t - mean_t) * (d - mean_d) for t, d in history) / spread
    return max(0.0, slope)


def scaled_ahead(
    decision: ScalingDecision, history: Sequence[tuple[float, float]], ctx: ScalingContext, targets: ScalingTargets
) -> ScalingDecision:
    """``decision`` raised to the demand ``targets.scale_ahead_s`` ahead while it rises (never lowered).

    A replica asked for now serves only after its start-up; under a rising load it then meets the demand of
    then, not of now. ``history`` holds the ``(time, demand)`` of recent decisions (the caller keeps it over
    ``trend_window_s``, and it must span most of it; the demand is the largest signal's ask). Only upward: a
    falling trend never removes replicas early, Serve's downscale delay still decides that. Only while the
    variant is short, its demand now above the replicas that run: a fleet that still has room for what it is
    asked waits for the demand itself, so that the up-and-down of a steady load is not read as a rise; and only
    while it is short over the window on average, not at its last reading alone, so that a burst is not either.
    """
    if targets.scale_ahead_s <= 0 or ctx.current_replicas == 0 or not history:
        return decision
    if history[-1][0] - history[0][0] < 0.9 * targets.trend_window_s:
        # A trend needs its whole window: fitted over the first second after a start, the rise from nothing to
        # the first requests reads as a steep slope (the simulator asked for the maximum at once, from t = 2 s).
        return decision
    if history[-1][1] <= ctx.current_replicas + _EPSILON:
        # Not short (a hysteresis): at a steady base load the ask wanders between replicas, and 20 s of a noisy
        # slope asked for more each time (the simulator, 3 seeds, this machine's warm-pool starts: the diurnal
        # wave 0.61 -> 0.57 of the fixed fleet's replica-seconds, the trace 0.63 -> 0.58, the step's 93.6% kept;
        # docs/autoscaling.md).
        return decision
    if sum(demand for _, demand in history) / len(history) <= ctx.current_replicas + _EPSILON:
        # Short now, but not over the window the trend is fitted to: a burst of a few requests on a fleet that
        # held the window's demand. The demand is a count of sequences, and under Poisson arrivals it
        # scatters by about its square root: at the diurnal wave's base (0.8 req/s, about one sequence on the
        # 8B's one replica) three requests within a second read as 1.5-1.8 replicas after seconds of 0-0.7, and
        # that window's slope, 20 s ahead, asked for 3-5 replicas that came when the burst had gone; so did two
        # bursts after the crest, on a fleet that had just scaled down (the real stack at 13, 116 and 134 s of
        # the wave, in every run, by the controller's log). A rise that the trend should meet, a step or a
        # wave's climb, lifts the window's mean above the fleet within a second or two of being short (the 10x
        # step within half a second).
        return decision
    ahead = history[-1][1] + rising_trend(history) * targets.scale_ahead_s
    wanted = min(max(math.ceil(ahead - _EPSILON), decision.replicas), ctx.max_replicas)
    if wanted <= decision.replicas:
        return decision
    return ScalingDecision(replicas=wanted, signal="trend", by_signal={**decision.by_signal, "trend": ahead})


def slo_breaking(ctx: ScalingContext, decision: ScalingDecision) -> bool:
    """Whether the variant fails requests now: the router sends demand that prefers it elsewhere or sheds it
    (``redirected_requests``), or its busy replicas wait or decode beyond the SLO targets (the ``slo`` signal
    asked). Either is a miss already happening, not a blip that may pass."""
    return ctx.redirected_requests > _EPSILON or "slo" in decision.by_signal


def held_upscale(
    replicas: int, target_replicas: int, pending_since: float | None, now: float, delay_s: float
) -> tuple[int, float | None]:
    """Serve's upscale delay (``_apply_delay_logic`` in ray/serve/autoscaling_policy.py) as a pure step: an ask
    above the current target is answered once asks above it have held for ``delay_s``; until then the target
    stays. Returns the replicas to ask Serve for and when the pending rise began (None: none pends).

    The policy keeps this delay instead of Serve (whose own upscale delay is then 0) so that the delay can depend
    on why replicas are wanted: it exists to let a blip pass, and a variant whose requests are already refused
    or late is not a blip. Serve keeps the downscale delay."""
    if replicas <= target_replicas:
        return replicas, None
    since = now if pending_since is None else pending_since
    if now - since + _EPSILON >= delay_s:
        return replicas, None
    return target_replicas, since
