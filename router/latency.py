"""One variant's latency model: predicts TTFT and TPOT from its load, learns from finished requests.

Per replica (Serve spreads a variant's requests over its ready replicas)::

    TTFT = base + (prompt tokens + prompt tokens queued ahead) * prefill_ms_per_token
                + requests to finish before a slot frees * mean_output_tokens * TPOT(running) / running
                + steps * (decode step of the batch - decode step of one sequence)
                + startup time (only while the variant has no ready replica)
    TPOT = TPOT at batch 1 + per extra sequence * (batch - 1) + per context token * context tokens of the batch
                + ms per prefill token * prefill per step

The prefill term is the interference of chunked prefill: a decode step that shares its iteration with
a prefill chunk lasts as long as both, so a replica that receives ``r`` prompt tokens per millisecond
decodes each token in ``T = d + c * r * T`` where ``d`` is the decode-only step and ``c`` the cost of
one prompt token, i.e. ``T = d / (1 - c * r)``. The model learns ``c`` from the prompt tokens actually
dispatched during each request's decode (per decode step), seeded from the profile's
``decode_ms_per_prefill_token`` where it is measured, else its prefill rate. (The prefill rate alone can
predict a small fraction of the mixed steps' real cost, docs/measurements.md: the bench now measures it.)

The context term is the KV cache a decode step reads: every running sequence's prompt and output so far.
A memory-bound engine reads all of it each step; the transformers engine's paged SDPA attends over the
whole batch's KV for each query, so there one long prompt decoding slows every short one beside it (on this
CPU and on H200s alike: docs/measurements.md). Seeded by the profile (the bench measures it: a short burst beside
long prompts decoding), learned from each request's TPOT with the context it was predicted for; absent (not
merely zero) when the profile gives context no cost, since learned from nothing it takes the batch slope's share.

The steps term is the decode a new prompt waits through: the step in progress when it arrives and the one
that prefills it, each as long as the running batch makes it (seeded at 1.5 steps, learned). Without it a
busy replica's TTFT is predicted too short wherever the step grows with the batch (docs/measurements.md); at
batch 1 it is part of ``base``.

Under load the TPOT prediction has a floor: the pace the replica's sequences measured lately (engine stats'
``recent_tpot_ms``, at ``recent_decode_batch``), carried over to the new batch
(:meth:`LatencyModel.predict_load_tpot_ms`), so that an engine slower than the model believes is seen as
slow at once, not after its requests have finished and taught it.

The slot term is a continuous batching engine's queue: a request that finds every slot taken waits for
running ones to finish, and they finish at ``running / (mean_output_tokens * TPOT)`` per millisecond. Where the
ingress knows how much the running sequences have left (``decode_tokens_left``, their mean), only the first
``running`` completions come from them (the k-th of ``running`` after ``2 k left / (running + 1)`` tokens, their
remaining work spread evenly); every later one is a queued request's whole answer (:func:`slot_wait_tokens`).
Scaling every completion by the running ones' mean remaining work, as it did, predicted about half the wait of
a deep queue, and under a spike the router kept accepting requests that were then late (docs/autoscaling.md).

The weights start from a :class:`~router.config.LatencyProfile` (or its pessimistic defaults) and are
refined by :meth:`LatencyModel.observe_ttft` / :meth:`LatencyModel.observe_tpot` (or both at once,
:meth:`LatencyModel.observe`) with recursive least squares: cheap (a 3x3 or 4x4 update), it forgets
old observations (a replica's speed drifts with its load mix and neighbours), clips outliers (one
request stalled behind a GC pause must not move the model much) and keeps every weight within
physical bounds.

Besides the weights, the model tracks how wrong its *decision-time* predictions were: an online upper
quantile of ``observed / predicted - 1`` per measure (:class:`_UpperQuantile`). That error includes
what no weight can fix (load that arrives after the decision, stale engine reports), so the policy
judges "meets the SLO" on ``prediction * (1 + margin)`` rather than on the mean.

Censored observations (a request that failed or timed out before its first token, or mid-stream)
say only "at least this long": they move the model only when they exceed its prediction, and then
count as an observation at the bound, clipped like any other.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from router.config import LatencyProfile, RouterConfig

# Prior strength, in observations: how many finished requests it takes to overrule the seed figures.
# Defaults are guesses, so the first few requests mostly replace them; a measured profile holds longer.
_PROFILE_PRIOR_OBSERVATIONS = 4.0
_DEFAULT_PRIOR_OBSERVATIONS = 0.25


# Not frozen: built per candidate (and per option the reservation checks) on every decision, where a frozen
# dataclass's __init__ costs three times a plain one's. Treat it as immutable all the same.
@dataclass(slots=True)
class Load:
    """What a new request finds ahead of it on one replica of a variant (per-replica averages)."""

    running: float  # sequences decoding now
    queued: float  # requests accepted but not yet running
    queued_prompt_tokens: float  # prefill work waiting ahead of the new request
    waiting_for_slot: float  # requests that must finish before the new one runs (0 when a slot is free)
    max_running: int  # batch slots of one replica
    context_tokens: float = 0.0  # tokens the running sequences hold in the KV cache (prompts and outputs so far)
    startup_ms: float = 0.0  # the variant has no ready replica yet: time until one serves
    prefill_tokens_per_s: float = 0.0  # prompt tokens arriving per second: prefill interleaved with decode
    decode_tokens_left: float | None = None  # tokens a running sequence has left to decode, on average
    # What the replica's sequences measured lately (engine reports): ms between tokens, in a batch of this many.
    measured_tpot_ms: float = 0.0  # 0.0: no measurement
    measured_batch: float = 0.0
    # How far the running sequences' remaining work spreads about ``decode_tokens_left`` (its standard deviation over
    # the ingress's own decoding requests); None: unknown, taken as spread evenly from none left to twice the mean.
    decode_tokens_left_sd: float | None = None
    # A slot is certain by then however long the running sequences take: replicas being started will serve by then
    # with room for this request (router.load); inf: none counted.
    slot_by_ms: float = math.inf

    @property
    def batch_when_running(self) -> float:
        """The batch the new request decodes in: everything running or queued ahead of it, plus itself."""
        # Not discounted by how soon running sequences finish: under steady traffic new ones take their
        # places, so the batch a request decodes in is the one it finds.
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
        # never seen); capping each variance at the prior's keeps one odd observation from swinging them.
        self._max_var = n * p0  # what the former trace cap let one direction reach
        self._forgetting = forgetting
        self._clip = clip
        self._residual_scale: float | None = None
        self.weights: tuple[float, ...] = self._unscaled()

    def _unscaled(self) -> tuple[float, ...]:
        return tuple(t * s for t, s in zip(self._theta, self._scale, strict=True))

    def predict(self, x: Sequence[float]) -> float:
        return _dot(self.weights, x)

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
            p_free = [sum(self._p[i][j] * phi[j] for j in range(n) if free[j]) if free[i] else 0.0 for i in range(n)]
            reach = _dot(phi, p_free)
            if reach <= 0.0:  # no free weight has a feature in this observation
                break
            short = wanted - _dot(theta, phi)
            theta = [t + v * short / reach for t, v in zip(theta, p_free, strict=True)]
        self._theta = [min(max(t, lo), hi) for t, lo, hi in zip(theta, self._lower, self._upper, strict=True)]

        p = [[(self._p[i][j] - gain[i] * p_phi[j]) / self._forgetting for j in range(n)] for i in range(n)]
        # Rounding makes P drift from symmetric over thousands of updates, and then from positive definite.
        p = [[0.5 * (p[i][j] + p[j][i]) for j in range(n)] for i in range(n)]
        # Per direction, not over the trace: a feature that is rarely non-zero (prefill interference on an
        # idle replica) must not use up the budget and freeze the others. D P D keeps P positive definite.
        shrink = [min(1.0, (self._max_var / p[i][i]) ** 0.5) if p[i][i] > 0 else 1.0 for i in range(n)]
        if any(d < 1.0 for d in shrink):
            p = [[p[i][j] * shrink[i] * shrink[j] for j in range(n)] for i in range(n)]
        self._p = p
        self.weights = self._unscaled()


class _UpperQuantile:
    """Online ``level`` quantile of relative prediction errors, by stochastic approximation.

    Each error moves the estimate up by ``step * level`` when above it and down by ``step * (1 - level)``
    otherwise, which settles where a ``level`` fraction of errors lie below. Bounded to [0, ``upper``]:
    a model that is pessimistic is corrected by its weights, not rewarded with a negative margin.

    Until it has seen errors the estimate knows nothing (it starts at 0 and climbs by ``step * level`` a
    time, ~50 errors to reach a margin of 1), so :attr:`value` blends it with a ``prior`` margin, worth
    ``prior_weight`` errors: a fresh model is not trusted as if it had been checked many times.
    """

    __slots__ = ("count", "estimate", "level", "prior", "prior_weight", "step", "upper", "value")

    def __init__(
        self, level: float, step: float = 0.02, upper: float = 3.0, prior: float = 0.0, prior_weight: float = 0.0
    ) -> None:
        self.level = level
        self.step = step
        self.upper = upper
        self.prior = prior
        self.prior_weight = prior_weight
        self.estimate = 0.0
        self.count = 0
        self.value = prior if prior_weight > 0 else 0.0

    def add(self, relative_error: float) -> None:
        if relative_error > self.estimate:
            self.estimate = min(self.upper, self.estimate + self.step * self.level)
        else:
            self.estimate = max(0.0, self.estimate - self.step * (1.0 - self.level))
        self.count += 1
        weight = self.prior_weight
        self.value = (self.count * self.estimate + weight * self.prior) / (self.count + weight)


# Error margins are kept per class of prompt length: a variant's errors on short chat say little about its
# errors on a 2k-token prompt (other terms dominate the prediction, and the engine's prefill meets contention the
# short ones never see), and a class it has seen few of keeps the cold-start margin. Boundaries in prompt tokens.
MARGIN_CLASS_BOUNDS = (256, 1024, 4096, 16384)


def margin_class(prompt_tokens: float) -> int:
    """The index of the error-margin class of a ``prompt_tokens`` prompt (see MARGIN_CLASS_BOUNDS)."""
    if prompt_tokens < 256:
        return 0
    if prompt_tokens < 1024:
        return 1
    if prompt_tokens < 4096:
        return 2
    if prompt_tokens < 16384:
        return 3
    return 4


# Prefill may use at most this share of a replica's time in the TPOT prediction: beyond it the replica
# cannot keep up, and the prediction (20x the decode step) says so without dividing by ~0.
_MAX_PREFILL_SHARE = 0.95
# The most the measured pace may stretch a TTFT's step-bound work (its prefill and the steps it waits through),
# against a pace figure gone wild (a stall of seconds over a window of few tokens).
MAX_SLOWDOWN = 10.0
# The half-width of an even spread is sqrt(3) of its standard deviation (spread_floor).
SQRT_3 = math.sqrt(3.0)


def clamp_slowdown(ratio: float) -> float:
    """A measured-over-modelled pace ``ratio`` as the stretch a TTFT's step-bound work takes: 1 when the steps
    are no slower than modelled, at most :data:`MAX_SLOWDOWN`."""
    return 1.0 if ratio <= 1.0 else (ratio if ratio < MAX_SLOWDOWN else MAX_SLOWDOWN)


def spread_floor(tokens_left: float, tokens_left_sd: float | None) -> float:
    """The least work a running sequence has left, taking the remaining work as spread evenly over ``tokens_left``
    +- sqrt(3) of its standard deviation and never below none (0.0 when the spread is unknown: spread evenly from
    none to twice the mean, as a steady stream of arrivals leaves it)."""
    if tokens_left_sd is None:
        return 0.0
    floor = tokens_left - SQRT_3 * tokens_left_sd
    return floor if floor > 0.0 else 0.0


def slot_wait_tokens(
    waiting_for_slot: float,
    running: float,
    tokens_left: float | None,
    mean_output: float,
    tokens_left_sd: float | None = None,
) -> float:
    """Decode tokens (at the running batch's TPOT, over ``running`` sequences) until ``waiting_for_slot`` requests
    have finished: ``waiting_for_slot * mean_output`` when what the running ones have left is unknown (the steady
    rate), else their ``tokens_left`` for the first ``running`` completions and a whole answer for each later one.
    The k-th of the running ones finishes after ``low + 2 k (tokens_left - low) / (running + 1)`` tokens, their
    remaining work spread evenly from ``low`` (:func:`spread_floor`) to ``2 tokens_left - low``: from none with the
    spread unknown, and later when the batch started together (a step fills a variant's slots within a second or
    two, and they all finish together, long after the first of an even spread would). Times ``TPOT / running`` it
    is the wait in ms."""
    if tokens_left is None:
        return waiting_for_slot * mean_output
    first = waiting_for_slot if waiting_for_slot < running else running
    low = spread_floor(tokens_left, tokens_left_sd) if first > 0.0 else 0.0
    return (
        first * 2.0 * (tokens_left - low) * running / (running + 1.0)
        + running * low  # 0.0 with the spread unknown or wide: the even spread from none
        + (waiting_for_slot - first) * mean_output
    )


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
        error_quantile: float = 0.97,
        prior_margin: float = 0.0,
        prior_margin_weight: float = 0.0,
    ) -> None:
        """``profile`` seeds the weights (None: the pessimistic defaults). ``prior_observations`` is how
        many finished requests it takes to overrule the seed (None: 4 for a profile, 0.25 for the
        defaults); ``forgetting`` the weight an observation keeps per later one (0.95: the last ~20
        count); ``clip`` how many typical errors one observation may count as at most;
        ``error_quantile`` the quantile of decision-time errors the margins track; ``prior_margin`` the margin
        assumed before any, worth ``prior_margin_weight`` of them (RouterConfig.cold_start_margin)."""
        if prior_observations is None:
            prior_observations = _DEFAULT_PRIOR_OBSERVATIONS if profile is None else _PROFILE_PRIOR_OBSERVATIONS
        if prior_observations <= 0 or not 0 < forgetting <= 1 or clip <= 0 or not 0 < error_quantile < 1:
            raise ValueError(
                "prior_observations and clip must be > 0, forgetting in (0, 1] and error_quantile in (0, 1)"
            )
        p = profile if profile is not None else LatencyProfile()
        # TTFT ~ base + prefill_ms_per_token * tokens + mean_output_tokens * slot_wait_feature
        #        + steps * (decode step at the running batch - at batch 1)
        self._ttft = _RobustRLS(
            (
                _Weight(p.base_ttft_ms, lower=0.0, upper=1e6, floor=1.0),
                # ms per prompt token
                _Weight(1000.0 / p.prefill_tokens_per_s, lower=1e-6, upper=1e3, floor=1e-3),
                # mean output tokens; feature: requests waiting for a slot x TPOT / running
                _Weight(p.mean_output_tokens, lower=1.0, upper=1e6, floor=1.0),
                # Decode steps a new prompt waits through: the step in progress and the one that prefills it
                # (chunked prefill shares steps with the running batch's decode), each longer than at batch 1
                # by what the batch adds; base holds them at batch 1.
                _Weight(1.5, lower=0.0, upper=100.0, floor=0.1),
            ),
            prior_observations=prior_observations,
            forgetting=forgetting,
            clip=clip,
        )
        # TPOT ~ at_batch_1 + per_extra_seq * (batch - 1) + ms_per_prefill_token * prefill tokens per step
        #        [+ per_context_token * context tokens of the batch]
        interference = p.decode_ms_per_prefill_token
        if interference is None:
            interference = 1000.0 / p.prefill_tokens_per_s
        tpot_weights = [
            _Weight(p.tpot_ms_at_batch_1, lower=1e-3, upper=1e5, floor=0.1),
            _Weight(p.tpot_ms_per_extra_seq, lower=0.0, upper=1e4, floor=0.01),
            _Weight(interference, lower=0.0, upper=1e3, floor=1e-3),
        ]
        # The context term only where the profile gives context a cost (the bench's calibration measures it).
        # Learned from nothing it took the batch slope's and the prefill's share wherever context grows with
        # them, and cost attainment where decode steps do not grow with context (docs/measurements.md).
        self._context_term = p.tpot_ms_per_context_token > 0.0
        if self._context_term:
            tpot_weights.append(_Weight(p.tpot_ms_per_context_token, lower=0.0, upper=10.0, floor=1e-6))
        self._tpot = _RobustRLS(
            tpot_weights,
            prior_observations=prior_observations,
            forgetting=forgetting,
            clip=clip,
        )
        self.observations = 0
        # One margin per class of prompt length (margin_class), per measure.
        classes = range(len(MARGIN_CLASS_BOUNDS) + 1)
        self._ttft_errors = [
            _UpperQuantile(error_quantile, prior=prior_margin, prior_weight=prior_margin_weight) for _ in classes
        ]
        self._tpot_errors = [
            _UpperQuantile(error_quantile, prior=prior_margin, prior_weight=prior_margin_weight) for _ in classes
        ]
        self._refresh()

    def _refresh(self) -> None:
        """Reads the weights into the figures every prediction needs, once per update of the weights instead of
        once per candidate of every decision: the model's snapshot. Everything that changes a weight goes
        through :meth:`_learn`, which calls this (tests/router/test_route_equivalence.py checks decisions made
        between observations against predictions from the live weights)."""
        at_batch_1, per_extra_seq, ms_per_prefill_token = self._tpot.weights[:3]
        per_context_token = self._tpot.weights[3] if self._context_term else 0.0
        base, ms_per_token, mean_output_tokens, steps = self._ttft.weights
        self._coefficients = (
            at_batch_1,
            per_extra_seq,
            ms_per_prefill_token,
            per_context_token,
            base,
            ms_per_token,
            mean_output_tokens,
            steps,
        )
        # An idle replica's TPOT: the SLO policy's "home" of a request no variant is sure to meet asks it of
        # every candidate.
        self.idle_tpot_ms = self.predict_tpot_ms(1.0)

    @property
    def prefill_ms_per_token(self) -> float:
        """The learned cost of one prompt token's prefill on one replica, in ms."""
        return self._ttft.weights[1]

    def ttft_margin_for(self, prompt_tokens: float) -> float:
        """How far above its TTFT predictions the outcomes go, as a fraction, at the tracked quantile, for a
        ``prompt_tokens`` prompt's class of prompt length."""
        return self._ttft_errors[margin_class(prompt_tokens)].value

    def tpot_margin_for(self, prompt_tokens: float) -> float:
        """The TPOT margin of a ``prompt_tokens`` prompt's class of prompt length."""
        return self._tpot_errors[margin_class(prompt_tokens)].value

    # ------------------------------------------------------------------ predictions

    def predict_tpot_ms(
        self, batch_size: float, prefill_tokens_per_s: float = 0.0, context_tokens: float = 0.0
    ) -> float:
        """Milliseconds per output token while decoding in a batch of ``batch_size`` sequences holding
        ``context_tokens`` tokens of KV cache, on a replica that receives ``prefill_tokens_per_s`` prompt
        tokens per second (their prefill shares the steps)."""
        at_batch_1, per_extra_seq, ms_per_prefill_token = self._tpot.weights[:3]
        decode_ms = at_batch_1 + per_extra_seq * (max(batch_size, 1.0) - 1.0) + self._context_ms(context_tokens)
        share = min(_MAX_PREFILL_SHARE, ms_per_prefill_token * max(prefill_tokens_per_s, 0.0) / 1000.0)
        return decode_ms / (1.0 - share)

    def predict_load_tpot_ms(
        self, load: Load, batch_size: float | None = None, prompt_tokens: float = 0.0, *, margin_of: float | None = None
    ) -> float:
        """TPOT in a batch of ``batch_size`` (None: the batch a new request joins) under ``load``, joined by a
        ``prompt_tokens`` prompt (its context adds to the batch's): the model's prediction, lifted where the
        replica's sequences measured a slower pace lately. ``margin_of``: the prompt length whose class's error
        margin the floor uses (None: ``prompt_tokens``).

        The measured pace (carried over to this batch by the model's own batch slope) holds what the model
        has no term for or has not learned yet, such as a long prompts' prefill slowing decode for longer than
        a bench point. It floors the prediction *inflated by the error margin*, the figure the SLO is judged on:
        the mean is lifted to ``measured / (1 + margin)``. Flooring the mean itself double-counted the
        measurement's own noise (on top of the margin) and cost attainment in the simulator; this way it gains
        (docs/measurements.md has both).
        """
        batch = load.batch_when_running if batch_size is None else batch_size
        rate = load.prefill_tokens_per_s
        modelled = self.predict_tpot_ms(batch, rate, load.context_tokens + prompt_tokens)
        if load.measured_tpot_ms <= 0.0:
            return modelled
        # The pace was measured in the batch as it is, before the new prompt joins it.
        at_measured_batch = self.predict_tpot_ms(max(load.measured_batch, 1.0), rate, load.context_tokens)
        measured = load.measured_tpot_ms * modelled / at_measured_batch
        margin = self.tpot_margin_for(prompt_tokens if margin_of is None else margin_of)
        return max(modelled, measured / (1.0 + margin))

    def slowdown(self, load: Load, prompt_tokens: float = 0.0) -> float:
        """How many times longer than the model's figure the replica's steps measured lately: the engines'
        pace (``measured_tpot_ms`` at ``measured_batch``) over the model's TPOT at that batch and the load's
        prefill rate and context, less the ``prompt_tokens`` class's TPOT margin (as the TPOT floor takes it);
        1 without a measurement or when the steps are no slower, at most :data:`MAX_SLOWDOWN`.

        The TTFT prediction stretches its step-bound work (the prompt's prefill, the prefill queued ahead and
        the decode steps it waits through) by it: a prefill runs in the same steps as the decode that measured
        the pace, so whatever slows those (a mixed batch's interference that the linear terms miss, a busy
        CPU) slows it alike. Without it a long prompt sent to a replica that was decoding beside other long
        prompts was predicted its idle prefill and took 2-4x that (docs/routing.md)."""
        if load.measured_tpot_ms <= 0.0:
            return 1.0
        batch = max(load.measured_batch, 1.0)
        at_measured = self.predict_tpot_ms(batch, load.prefill_tokens_per_s, load.context_tokens)
        return clamp_slowdown(load.measured_tpot_ms / at_measured / (1.0 + self.tpot_margin_for(prompt_tokens)))

    def predict_request(self, prompt_tokens: int, load: Load, cached_tokens: int = 0) -> tuple[float, float]:
        """``(predict_ttft_ms(prompt_tokens, load), predict_load_tpot_ms(load, None, prompt_tokens))``, the same
        figures in one pass: the reservation asks this of each kind it keeps room for, and the two share most of
        their terms (the prefill share of a step, the measured pace, the weights), which are computed once here.
        Keep it in step with the methods it stands for (tests/router/test_latency.py compares them), and with
        ``router.policy._Judge.predict``, which is this arithmetic inline for every candidate of every decision
        (tests/router/test_route_equivalence.py)."""
        (
            at_batch_1,
            per_extra_seq,
            ms_per_prefill_token,
            per_context_token,
            base,
            ms_per_token,
            mean_output_tokens,
            steps,
        ) = self._coefficients
        rate = load.prefill_tokens_per_s
        share = ms_per_prefill_token * (rate if rate > 0.0 else 0.0) / 1000.0
        free = 1.0 - (share if share < _MAX_PREFILL_SHARE else _MAX_PREFILL_SHARE)
        context = load.context_tokens
        running = load.running if load.running > 1.0 else 1.0
        queued_batch = load.running + load.queued + 1.0
        batch = float(load.max_running) if load.max_running < queued_batch else queued_batch
        batch_1 = batch if batch > 1.0 else 1.0
        # The new request's decode: in the batch it joins, its prompt added to the batch's context.
        batch_ms = per_extra_seq * (batch_1 - 1.0)
        context_ms = per_context_token * (context + prompt_tokens)
        tpot = (at_batch_1 + batch_ms + context_ms) / free
        measured_tpot_ms = load.measured_tpot_ms
        slow = 1.0
        if measured_tpot_ms > 0.0:
            measured_batch = load.measured_batch if load.measured_batch > 1.0 else 1.0
            at_measured = (at_batch_1 + per_extra_seq * (measured_batch - 1.0) + per_context_token * context) / free
            lift = 1.0 + self._tpot_errors[margin_class(prompt_tokens)].value
            measured = measured_tpot_ms * tpot / at_measured / lift
            tpot = measured if measured > tpot else tpot
            slow = clamp_slowdown(measured_tpot_ms / at_measured / lift)  # LatencyModel.slowdown, in this pass
        slot_wait = 0.0
        if load.waiting_for_slot:
            # The running batch's TPOT, for the wait for a slot (only then: most candidates have a free one).
            tpot_running = (at_batch_1 + per_extra_seq * (running - 1.0) + per_context_token * context) / free
            if measured_tpot_ms > 0.0:
                measured = measured_tpot_ms * tpot_running / at_measured / lift
                tpot_running = measured if measured > tpot_running else tpot_running
            tokens_left = None if load.decode_tokens_left is None else max(load.decode_tokens_left, 1.0)
            tokens = slot_wait_tokens(
                load.waiting_for_slot, running, tokens_left, mean_output_tokens, load.decode_tokens_left_sd
            )
            slot_wait = tokens * tpot_running / running
            if slot_wait > load.slot_by_ms:
                slot_wait = load.slot_by_ms
        prefill = (prompt_tokens - cached_tokens + load.queued_prompt_tokens) * ms_per_token
        return base + slow * (prefill + steps * (batch_ms + context_ms)) + slot_wait + load.startup_ms, tpot

    def predict_idle_ttft_ms(self, prompt_tokens: int, startup_ms: float = 0.0) -> float:
        """TTFT of a ``prompt_tokens`` prompt on a replica with nothing running or queued (plus ``startup_ms``):
        ``predict_ttft_ms`` of an idle :class:`Load`, without building one."""
        _, _, _, per_context_token, base, ms_per_token, _, steps = self._coefficients
        return base + (prompt_tokens * ms_per_token + steps * (per_context_token * prompt_tokens)) + startup_ms

    def predict_ttft_ms(self, prompt_tokens: int, load: Load, cached_tokens: int = 0) -> float:
        """Milliseconds from dispatch to the first token of a ``prompt_tokens`` prompt under ``load``, of which
        ``cached_tokens`` come from the replica's prefix cache (not prefilled; still in the decode's context)."""
        base, ms_per_token, mean_output_tokens, steps = self._ttft.weights
        running = max(load.running, 1.0)
        tpot = self.predict_load_tpot_ms(load, running, margin_of=prompt_tokens)
        # A slot frees when a running sequence finishes: its remaining decode work, where the ingress knows
        # it (its own requests' max_tokens less their progress), else the learned mean answer length.
        tokens_left = None if load.decode_tokens_left is None else max(load.decode_tokens_left, 1.0)
        slot_wait = (
            slot_wait_tokens(
                load.waiting_for_slot, running, tokens_left, mean_output_tokens, load.decode_tokens_left_sd
            )
            * tpot
            / running
        )
        if slot_wait > load.slot_by_ms:
            slot_wait = load.slot_by_ms
        prefill = (prompt_tokens - cached_tokens + load.queued_prompt_tokens) * ms_per_token
        step = self._batch_step_ms(load.batch_when_running, load.context_tokens + prompt_tokens)
        return base + self.slowdown(load, prompt_tokens) * (prefill + steps * step) + slot_wait + load.startup_ms

    def _batch_step_ms(self, batch_size: float, context_tokens: float) -> float:
        """How much longer a decode step of ``batch_size`` sequences holding ``context_tokens`` of KV is than
        one of a single sequence with no context."""
        return self._tpot.weights[1] * (max(batch_size, 1.0) - 1.0) + self._context_ms(context_tokens)

    def _context_ms(self, context_tokens: float) -> float:
        """How much longer a decode step is for the KV context its batch holds (0 without the term)."""
        return self._tpot.weights[3] * context_tokens if self._context_term else 0.0

    # ------------------------------------------------------------------ learning

    def observe_ttft(
        self,
        prompt_tokens: int,
        ttft_ms: float,
        *,
        queued_tokens_ahead: float = 0.0,
        waiting_for_slot: float = 0.0,
        batch_size: float = 1.0,
        context_tokens: float = 0.0,
        predicted_ms: float | None = None,
        censored: bool = False,
        slowdown: float = 1.0,
    ) -> None:
        """Learns from one request's time to first token (at its first token, not at its end).

        ``queued_tokens_ahead``, ``waiting_for_slot``, ``batch_size`` and ``context_tokens`` (its own prompt
        included) describe the replica at dispatch
        (the :class:`Load` its prediction used); ``predicted_ms`` is that decision-time prediction, which
        trains the error margin. ``censored``: the request failed or timed out before its first token and
        ``ttft_ms`` is only a lower bound (the elapsed time). ``slowdown``: what the prediction stretched the
        step-bound work by (:meth:`slowdown`, ``Prediction.slowdown``), so that the weights learn the work at
        the model's own pace and a slow spell does not teach them what the measured pace already holds.
        """
        if ttft_ms < 0:
            return
        batch = max(batch_size, 1.0)
        x = (
            1.0,
            slowdown * (prompt_tokens + queued_tokens_ahead),
            waiting_for_slot * self.predict_tpot_ms(batch) / batch,
            slowdown * self._batch_step_ms(batch, context_tokens),
        )
        if self._learn(self._ttft, x, ttft_ms, censored):
            self.observations += 1
        _track(self._ttft_errors[margin_class(prompt_tokens)], ttft_ms, predicted_ms, censored)

    def observe_tpot(
        self,
        tpot_ms: float,
        batch_size: float,
        *,
        prefill_tokens_per_step: float = 0.0,
        context_tokens: float = 0.0,
        predicted_ms: float | None = None,
        censored: bool = False,
        prompt_tokens: float = 0.0,
    ) -> None:
        """Learns from one request's mean time per output token, measured over its decode.

        ``prefill_tokens_per_step``: prompt tokens the replica received per decode step of this request
        (what its steps shared with prefill). ``context_tokens``: the KV tokens of the batch it was predicted
        to decode in, its own prompt included. ``censored``: the stream broke off, ``tpot_ms`` is a bound.
        ``prompt_tokens``: the request's own prompt, whose class of length keeps the error margin it trains.
        """
        if tpot_ms <= 0:
            return
        x: tuple[float, ...] = (1.0, max(batch_size, 1.0) - 1.0, max(prefill_tokens_per_step, 0.0))
        if self._context_term:
            x += (max(context_tokens, 0.0),)
        self._learn(self._tpot, x, tpot_ms, censored)
        _track(self._tpot_errors[margin_class(prompt_tokens)], tpot_ms, predicted_ms, censored)

    def track_tpot_error(
        self, tpot_ms: float, predicted_ms: float | None, *, prompt_tokens: float = 0.0, censored: bool = False
    ) -> None:
        """Teaches the TPOT error margin alone (not the weights): a request's whole decode against its decision-time
        prediction, for a caller that taught the weights in windows (``router.inflight``'s checkpoint)."""
        if tpot_ms > 0:
            _track(self._tpot_errors[margin_class(prompt_tokens)], tpot_ms, predicted_ms, censored)

    def observe(
        self,
        prompt_tokens: int,
        ttft_ms: float,
        tpot_ms: float | None,
        batch_size: float,
        queued_tokens_ahead: float,
        *,
        waiting_for_slot: float = 0.0,
        prefill_tokens_per_step: float = 0.0,
        context_tokens: float = 0.0,
    ) -> None:
        """Learns from one finished request at once (TPOT first, so TTFT's slot term uses the new TPOT).

        ``tpot_ms`` is None when the request produced a single token. ``batch_size``,
        ``queued_tokens_ahead``, ``waiting_for_slot`` and ``context_tokens`` describe the replica as it was
        when the request was dispatched (the :class:`Load` its prediction used: ``batch_when_running``,
        ``queued_prompt_tokens``, ``waiting_for_slot``, ``context_tokens`` plus its prompt); the model
        attributes the TTFT it did not explain by prompt length to those.
        """
        if tpot_ms is not None and tpot_ms > 0:
            self.observe_tpot(
                tpot_ms,
                batch_size,
                prefill_tokens_per_step=prefill_tokens_per_step,
                context_tokens=context_tokens,
                prompt_tokens=prompt_tokens,
            )
        self.observe_ttft(
            prompt_tokens,
            ttft_ms,
            queued_tokens_ahead=queued_tokens_ahead,
            waiting_for_slot=waiting_for_slot,
            batch_size=batch_size,
            context_tokens=context_tokens,
        )

    def _learn(self, rls: _RobustRLS, x: Sequence[float], y: float, censored: bool) -> bool:
        # A lower bound at or below the prediction carries no information about the weights.
        if censored and y <= rls.predict(x):
            return False
        rls.update(x, y)
        self._refresh()
        return True

    def profile(self) -> LatencyProfile:
        """The current estimates, in the shape of the figures that seed a model (for logs and /variants)."""
        base, ms_per_token, mean_output_tokens, _ = self._ttft.weights
        at_batch_1, per_extra_seq, interference = self._tpot.weights[:3]
        return LatencyProfile(
            prefill_tokens_per_s=1000.0 / ms_per_token,
            base_ttft_ms=base,
            tpot_ms_at_batch_1=at_batch_1,
            tpot_ms_per_extra_seq=per_extra_seq,
            tpot_ms_per_context_token=self._tpot.weights[3] if self._context_term else 0.0,
            decode_ms_per_prefill_token=interference,
            mean_output_tokens=mean_output_tokens,
        )


def _track(error: _UpperQuantile, observed_ms: float, predicted_ms: float | None, censored: bool) -> None:
    if predicted_ms is None or predicted_ms <= 0:
        return
    relative = observed_ms / predicted_ms - 1.0
    # A censored outcome is at least this late: only a bound above the margin is informative.
    if censored and relative <= error.estimate:
        return
    error.add(relative)


def new_latency_model(profile: LatencyProfile | None, config: RouterConfig) -> LatencyModel:
    """A variant's model as the router keeps it: seeded by ``profile``, with the config's cold-start margin."""
    return LatencyModel(
        profile, prior_margin=config.cold_start_margin, prior_margin_weight=config.cold_start_observations
    )
