"""Ray Serve's autoscaling loop for one simulated deployment, around the project's own scaling policy.

Production: each replica's ``record_autoscaling_stats`` returns ``router.serve_autoscaling.engine_metrics``;
Serve averages the figures over ``look_back_period_s``, pushes them to its controller every
``metrics_interval_s``, and on every control-loop tick calls the deployment's policy with an
``AutoscalingContext``, then applies its delays and bounds. Here the same functions run on simulated
figures: ``engine_metrics`` builds each sample, ``EngineLoadPolicy`` (which calls
``router.serve_autoscaling.scaling_context`` and ``router.autoscaling.desired_replicas``) decides from a
context object with the attributes it reads. What is Serve's own code is mirrored in a few lines, and
``tests/sim/test_autoscaler.py`` checks the mirrors against the installed Ray:

* ``_apply_delay_logic`` (ray/serve/autoscaling_policy.py): a scale-up (down) takes effect once every
  decision for ``upscale_delay_s`` (``downscale_delay_s``) wanted it; a change of direction resets.
* ``replica_queue_length_autoscaling_policy``, Serve's default: total ongoing requests over
  ``target_ongoing_requests`` (the ``ongoing_requests`` policy of :class:`AutoscalingSpec`).
* The cold-start path: a deployment at zero replicas with requests waiting scales to one at once.

The control loop ticks every ``tick_s`` simulated seconds (Serve: 0.1 s); delays are measured in time,
as Serve measures them, so a coarser tick only rounds them up to a tick.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from engines.protocol import EngineStats
from router.serve_autoscaling import AutoscalingSpec, EngineLoadPolicy, engine_metrics
from sim.deployment import SimDeployment
from sim.replica import SimReplica

Policy = Callable[[Any], tuple[float, dict[str, Any]]]

_DELAY_ELAPSED_EPS_S = 1e-6  # as Serve's: float noise must not hold back a due decision


@dataclass(slots=True)
class SimAutoscalingContext:
    """The attributes of Ray's ``AutoscalingContext`` that the policies read."""

    aggregated_metrics: dict[str, dict[str, float]]
    running_replicas: list[str]
    current_num_replicas: int
    target_num_replicas: int
    capacity_adjusted_min_replicas: int
    capacity_adjusted_max_replicas: int
    total_queued_requests: float
    total_num_requests: float
    target_ongoing_requests: float
    current_time: float = 0.0  # the simulated clock, as Ray's context carries the controller's
    policy_state: dict[str, Any] = field(default_factory=dict)


def ongoing_requests_policy(ctx: Any) -> tuple[float, dict[str, Any]]:
    """Serve's default policy (``_core_replica_queue_length_policy``): ongoing requests over the target."""
    if ctx.current_num_replicas == 0:
        return ctx.target_num_replicas, {}
    return ctx.total_num_requests / ctx.target_ongoing_requests, {}


def apply_delay(desired: int, current_target: int, spec: AutoscalingSpec, state: dict[str, Any], now: float) -> int:
    """Serve's ``_apply_delay_logic`` with the delays of ``spec``'s Serve config (policy engine_load holds its
    upscale delay itself, Serve's is 0): the target after this tick; ``state`` carries the pending decision."""
    direction = state.get("direction", 0)
    since = state.get("since")
    decided = current_target
    if desired > current_target:
        if direction < 0:
            since = None
        direction = 1
        since = now if since is None else since
        if now - since + _DELAY_ELAPSED_EPS_S >= spec.serve_upscale_delay_s:
            direction, since, decided = 0, None, desired
    elif desired < current_target:
        if direction > 0:
            since = None
        direction = -1
        if current_target == 1:
            delay = (
                spec.downscale_to_zero_delay_s if spec.downscale_to_zero_delay_s is not None else spec.downscale_delay_s
            )
        else:
            delay = spec.downscale_delay_s
            desired = max(1, desired)
        since = now if since is None else since
        if now - since + _DELAY_ELAPSED_EPS_S >= delay:
            direction, since, decided = 0, None, desired
    else:
        direction, since = 0, None
    state["direction"], state["since"] = direction, since
    return decided


class _Recent:
    """Hands a simulated replica's recent latency to ``engine_metrics`` as a ``RecentLatency`` would
    (``router.serve_autoscaling.LatencySource``)."""

    def __init__(self, replica: SimReplica, now: float) -> None:
        self._replica, self._now = replica, now

    def means_ms(self) -> tuple[float | None, float | None]:
        return self._replica.recent.means_ms(self._now)

    def oldest_wait_ms(self) -> float:
        return self._replica.oldest_wait_ms(self._now)


def replica_metrics(replica: SimReplica, now: float, redirected: float = 0.0) -> dict[str, float]:
    """What the replica's ``record_autoscaling_stats`` would return now (``redirected``: as the board relays it)."""
    stats = EngineStats(
        queued_requests=replica.queued,
        running_requests=replica.running,
        queued_prompt_tokens=replica.queued_prompt_tokens,
        kv_blocks_used=replica.kv_used,
        kv_blocks_total=replica.profile.kv_cache_tokens,
        context_length=replica.profile.context_length,
        max_running_requests=replica.profile.max_running_requests,
        recent_tpot_ms=replica.pace.tpot_ms(now),
    )
    return engine_metrics(stats, _Recent(replica, now), redirected)


class _Window:
    """Running means of a replica's samples over the look-back period."""

    def __init__(self) -> None:
        self.samples: deque[tuple[float, dict[str, float]]] = deque()
        self.sums: dict[str, float] = {}

    def add(self, now: float, values: dict[str, float], horizon: float) -> None:
        self.samples.append((now, values))
        for key, value in values.items():
            self.sums[key] = self.sums.get(key, 0.0) + value
        while self.samples and self.samples[0][0] < horizon:
            for key, value in self.samples.popleft()[1].items():
                self.sums[key] -= value

    def means(self) -> dict[str, float]:
        n = len(self.samples)
        return {key: total / n for key, total in self.sums.items()} if n else {}


class SimAutoscaler:
    """Serve's autoscaling state for one deployment: metric windows, the policy call, delays and bounds."""

    def __init__(self, spec: AutoscalingSpec, policy: Policy | None = None) -> None:
        self.spec = spec
        if policy is None:
            policy = (
                cast(Policy, EngineLoadPolicy(**spec.policy_targets()))
                if spec.policy == "engine_load"
                else ongoing_requests_policy
            )
        self.policy = policy
        self.metrics_interval_s = spec.metrics_interval_s or 10.0  # Serve's default push period
        self._windows: dict[str, _Window] = {}
        self._ongoing = _Window()
        self._pushed: dict[str, dict[str, float]] = {}
        self._pushed_totals: dict[str, float] = {}
        self._last_push_s = -math.inf
        self._state: dict[str, Any] = {}

    def record(self, deployment: SimDeployment, now: float, redirected: float = 0.0) -> None:
        """Samples every ready replica's figures and the deployment's request counts (``redirected``: the
        requests the ingress redirected away from this variant, ``router.redirect``)."""
        horizon = now - self.spec.look_back_period_s
        alive = set()
        for replica in deployment.ready:
            alive.add(replica.replica_id)
            window = self._windows.setdefault(replica.replica_id, _Window())
            window.add(now, replica_metrics(replica, now, redirected), horizon)
        for gone in set(self._windows) - alive:
            del self._windows[gone]
        queued = float(len(deployment.handle_queue))
        ongoing = sum(r.ongoing for r in deployment.replicas) + queued
        self._ongoing.add(now, {"queued": queued, "ongoing": ongoing}, horizon)
        if now - self._last_push_s >= self.metrics_interval_s:
            self._push(now)

    def _push(self, now: float) -> None:
        self._last_push_s = now
        pushed: dict[str, dict[str, float]] = {}
        for replica_id, window in self._windows.items():
            for key, value in window.means().items():
                pushed.setdefault(key, {})[replica_id] = value
        self._pushed = pushed
        self._pushed_totals = self._ongoing.means()

    def decide(self, deployment: SimDeployment, now: float, waking: bool = False) -> int:
        """One control-loop tick: the deployment's new target number of replicas (``waking``: the ingress has a
        wake-up call waiting at this deployment's handle, ``serve_app.routing.RoutingTable._wake``)."""
        spec = self.spec
        ready_ids = [r.replica_id for r in deployment.ready]
        current_target = deployment.target
        # Requests waiting for a deployment at zero replicas are seen at once (Serve's handle metrics).
        ongoing = self._pushed_totals.get("ongoing", 0.0)
        waiting = len(deployment.handle_queue) + int(waking)
        if not ready_ids and waiting:
            ongoing = max(ongoing, float(waiting))
        ctx = SimAutoscalingContext(
            aggregated_metrics=self._pushed,
            running_replicas=ready_ids,
            current_num_replicas=len(ready_ids),
            target_num_replicas=current_target,
            capacity_adjusted_min_replicas=spec.min_replicas,
            capacity_adjusted_max_replicas=spec.max_replicas,
            total_queued_requests=self._pushed_totals.get("queued", 0.0),
            total_num_requests=ongoing,
            target_ongoing_requests=spec.target_ongoing_requests,
            current_time=now,
        )
        if ctx.current_num_replicas == 0 and ctx.total_num_requests > 0:  # Serve's cold-start path
            return min(max(1, current_target), spec.max_replicas)
        wanted, _ = self.policy(ctx)
        desired = math.ceil(wanted)
        if ctx.current_num_replicas == 0 and desired > 0:
            decided = desired
        else:
            decided = apply_delay(max(0, desired), current_target, spec, self._state, now)
        return min(max(decided, spec.min_replicas), spec.max_replicas)
