"""One variant's latency model: predicts TTFT and TPOT from its load, learns from finished requests.

Per replica (Serve spreads a variant's requests over its ready replicas)::

    TTFT = base + (prompt tokens + prompt tokens queued ahead) * prefill_ms_per_token
                + requests to finish before a slot frees * mean_output_tokens * TPOT(running) / running
                + startup time (only while the variant has no ready replica)
    TPOT = TPOT at batch 1 + per extra sequence * (running batch size - 1)

The slot term is a continuous batching engine's queue: a request that finds every slot taken waits for
running ones to finish, and they finish at ``running / (mean_output_tokens * TPOT)`` per millisecond.

The weights start from a :class:`~router.config.LatencyProfile` (or its pessimistic defaults) and are
refined by :meth:`LatencyModel.observe` with recursive least squares: cheap (a 3x3 update), it forgets
old observations (a replica's speed drifts with its load mix and neighbours), clips outliers (one
request stalled behind a GC pause must not move the model much) and keeps every weight within
physical bounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from router.config import LatencyProfile

# Prior strength, in observations: how many finished requests it takes to overrule the seed figures.
# Defaults are guesses, so the first few requests mostly replace them; a measured profile holds longer.
_PROFILE_PRIOR_OBSERVATIONS = 4.0
_DEFAULT_PRIOR_OBSERVATIONS = 0.25


@dataclass(frozen=True, slots=True)
class Load:
    """What a new request finds ahead of it on one replica of a variant (per-replica averages)."""

    running: float  # sequences decoding now
    queued: float  # requests accepted but not yet running
    queued_prompt_tokens: float  # prefill work waiting ahead of the new request
    waiting_for_slot: float  # requests that must finish before the new one runs (0 when a slot is free)
    max_running: int  # batch slots of one replica
    startup_ms: float = 0.0  # the variant has no ready replica yet: time until one serves

    @property
    def batch_when_running(self) -> float:
        """The batch the new request decodes in: everything running or queued ahead of it, plus itself."""
        return min(float(self.max_running), self.running + self.queued + 1.0)


class _Weight(NamedTuple):
    """One weight of a linear latency term: its seed value and bounds."""

    value: float
    lower: float
    upper: float
    floor: float  # the smallest magnitude expected of the weight: the unit of its uncertainty for a seed of 0


class _RobustRLS:
    """Recursive least squares ``y ~ sum(w_i * x_i)`` with forgetting, clipped residuals, bounded weights.

    Everything is relative, so one set of constants serves milliseconds on a GPU and seconds on a CPU:
    each weight is learned as a multiple of its seed value (a correction is shared among the terms in
    proportion to how much each contributes to the prediction, whatever their units), and each error as
    a fraction of the prediction (latency noise grows with latency). Plain Python on 2-3 weights: numpy
    calls would cost more than the arithmetic.
    """

    def __init__(self, weights: Sequence[_Weight], prior_observations: float, forgetting: float, clip: float):
        n = len(weights)
        self._scale = [max(abs(w.value), w.floor) for w in weights]
        self._lower = [w.lower / s for w, s in zip(weights, self._scale, strict=True)]
        self._upper = [w.upper / s for w, s in zip(weights, self._scale, strict=True)]
        self._theta = [
            min(max(w.value / s, lo), hi)
            for w, s, lo, hi in zip(weights, self._scale, self._lower, self._upper, strict=True)
        ]
        # A relative error of 1 has unit weight, so a prior of 1/k is worth k observations.
        p0 = 1.0 / prior_observations
        self._p = [[p0 if i == j else 0.0 for j in range(n)] for i in range(n)]
        # Forgetting inflates the covariance along directions no observation excites (a prompt length
        # never seen); capping its trace at the prior's keeps one odd observation from swinging them.
        self._max_trace = n * p0
        self._forgetting = forgetting
        self._clip = clip
        self._residual_scale: float | None = None
        self.weights: tuple[float, ...] = self._unscaled()

    def _unscaled(self) -> tuple[float, ...]:
        return tuple(t * s for t, s in zip(self._theta, self._scale, strict=True))

    def update(self, x: Sequence[float], y: float) -> None:
        n = len(self._theta)
        contributions = [v * s for v, s in zip(x, self._scale, strict=True)]
        predicted = _dot(self._theta, contributions)
        norm = max(abs(predicted), 1.0)
        phi = [c / norm for c in contributions]
        residual = (y - predicted) / norm
        # Huber-style: a residual beyond `clip` typical residuals counts only as that many. The typical
        # size never falls below 10%, so a lasting change still gets through within a few observations.
        scale = self._residual_scale
        if scale is None:
            clipped, scale = residual, abs(residual)
        else:
            limit = self._clip * max(scale, 0.1)
            clipped = max(-limit, min(limit, residual))
            scale = 0.9 * scale + 0.1 * abs(clipped)
        self._residual_scale = scale

        p_phi = [_dot(row, phi) for row in self._p]
        phi_p_phi = _dot(phi, p_phi)
        gain = [v / (self._forgetting + phi_p_phi) for v in p_phi]
        theta = [t + k * clipped for t, k in zip(self._theta, gain, strict=True)]
        # Bounds: pin each weight that left them and let the free ones make up the move of the prediction
        # it could not (else a base TTFT pinned at 0 would leave a too-slow prefill rate uncorrected).
        wanted = predicted / norm + clipped * phi_p_phi / (self._forgetting + phi_p_phi)
        free = [True] * n
        for _ in range(n):
            out = [i for i in range(n) if free[i] and not self._lower[i] <= theta[i] <= self._upper[i]]
            if not out:
                break
            for i in out:
                theta[i] = min(max(theta[i], self._lower[i]), self._upper[i])
                free[i] = False
            p_free = [
                sum(self._p[i][j] * phi[j] for j in range(n) if free[j]) if free[i] else 0.0 for i in range(n)
            ]
            reach = _dot(phi, p_free)
            if reach <= 0.0:  # no free weight has a feature in this observation
                break
            short = wanted - _dot(theta, phi)
            theta = [t + v * short / reach for t, v in zip(theta, p_free, strict=True)]
        self._theta = [min(max(t, lo), hi) for t, lo, hi in zip(theta, self._lower, self._upper, strict=True)]

        p = [[(self._p[i][j] - gain[i] * p_phi[j]) / self._forgetting for j in range(n)] for i in range(n)]
        trace = sum(p[i][i] for i in range(n))
        if trace > self._max_trace:
            p = [[v * self._max_trace / trace for v in row] for row in p]
        self._p = p
        self.weights = self._unscaled()


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(u * v for u, v in zip(a, b, strict=True))


class LatencyModel:
    """Predicts one variant's TTFT and TPOT; learns online from the timings of finished requests.

    Not thread-safe: one ingress event loop owns it (observations and decisions interleave there).
    """

    def __init__(
        self,
        profile: LatencyProfile | None = None,
        *,
        prior_observations: float | None = None,
        forgetting: float = 0.95,
        clip: float = 3.0,
    ) -> None:
        """``profile`` seeds the weights (None: the pessimistic defaults). ``prior_observations`` is how
        many finished requests it takes to overrule the seed (None: 4 for a profile, 0.25 for the
        defaults); ``forgetting`` the weight an observation keeps per later one (0.95: the last ~20
        count); ``clip`` how many typical errors one observation may count as at most."""
        if prior_observations is None:
            prior_observations = (
                _DEFAULT_PRIOR_OBSERVATIONS if profile is None else _PROFILE_PRIOR_OBSERVATIONS
            )
        if prior_observations <= 0 or not 0 < forgetting <= 1 or clip <= 0:
            raise ValueError("prior_observations and clip must be > 0 and forgetting in (0, 1]")
        p = profile if profile is not None else LatencyProfile()
        # TTFT ~ base + prefill_ms_per_token * tokens + mean_output_tokens * slot_wait_feature
        self._ttft = _RobustRLS(
            (
                _Weight(p.base_ttft_ms, lower=0.0, upper=1e6, floor=1.0),
                # ms per prompt token
                _Weight(1000.0 / p.prefill_tokens_per_s, lower=1e-6, upper=1e3, floor=1e-3),
                # mean output tokens; feature: requests waiting for a slot x TPOT / running
                _Weight(p.mean_output_tokens, lower=1.0, upper=1e6, floor=1.0),
            ),
            prior_observations=prior_observations,
            forgetting=forgetting,
            clip=clip,
        )
        # TPOT ~ at_batch_1 + per_extra_seq * (batch - 1)
        self._tpot = _RobustRLS(
            (
                _Weight(p.tpot_ms_at_batch_1, lower=1e-3, upper=1e5, floor=0.1),
                _Weight(p.tpot_ms_per_extra_seq, lower=0.0, upper=1e4, floor=0.01),
            ),
            prior_observations=prior_observations,
            forgetting=forgetting,
            clip=clip,
        )
        self.observations = 0

    # ------------------------------------------------------------------ predictions

    def predict_tpot_ms(self, batch_size: float) -> float:
        """Milliseconds per output token while decoding in a batch of ``batch_size`` sequences."""
        at_batch_1, per_extra_seq = self._tpot.weights
        return at_batch_1 + per_extra_seq * (max(batch_size, 1.0) - 1.0)

    def predict_ttft_ms(self, prompt_tokens: int, load: Load) -> float:
        """Milliseconds from dispatch to the first token of a ``prompt_tokens`` prompt under ``load``."""
        base, ms_per_token, mean_output_tokens = self._ttft.weights
        running = max(load.running, 1.0)
        slot_wait = load.waiting_for_slot * mean_output_tokens * self.predict_tpot_ms(running) / running
        return base + (prompt_tokens + load.queued_prompt_tokens) * ms_per_token + slot_wait + load.startup_ms

    # ------------------------------------------------------------------ learning

    def observe(
        self,
        prompt_tokens: int,
        ttft_ms: float,
        tpot_ms: float | None,
        batch_size: float,
        queued_tokens_ahead: float,
        *,
        waiting_for_slot: float = 0.0,
    ) -> None:
        """Learns from one finished request.

        ``tpot_ms`` is None when the request produced a single token. ``batch_size``,
        ``queued_tokens_ahead`` and ``waiting_for_slot`` describe the replica as it was when the request
        was dispatched (the :class:`Load` its prediction used: ``batch_when_running``,
        ``queued_prompt_tokens``, ``waiting_for_slot``); the model attributes the TTFT it did not
        explain by prompt length to those.
        """
        batch = max(batch_size, 1.0)
        if tpot_ms is not None and tpot_ms > 0:
            self._tpot.update((1.0, batch - 1.0), tpot_ms)
        if ttft_ms >= 0:
            tpot_now = tpot_ms if tpot_ms is not None and tpot_ms > 0 else self.predict_tpot_ms(batch)
            self._ttft.update(
                (1.0, prompt_tokens + queued_tokens_ahead, waiting_for_slot * tpot_now / batch), ttft_ms
            )
        self.observations += 1

    def profile(self) -> LatencyProfile:
        """The current estimates, in the shape of the figures that seed a model (for logs and /variants)."""
        base, ms_per_token, mean_output_tokens = self._ttft.weights
        at_batch_1, per_extra_seq = self._tpot.weights
        return LatencyProfile(
            prefill_tokens_per_s=1000.0 / ms_per_token,
            base_ttft_ms=base,
            tpot_ms_at_batch_1=at_batch_1,
            tpot_ms_per_extra_seq=per_extra_seq,
            mean_output_tokens=mean_output_tokens,
        )
