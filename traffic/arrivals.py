"""Arrival processes: pure, seeded generators of send times (seconds from the start of a run).

The generators are infinite (a replayed trace is as long as its trace); the load generator stops
at its own count and time bounds. They take no clock and do no I/O, so shapes are testable exactly
and the simulator can reuse them.

Every rate-driven process is one idea, :func:`piecewise`: a piecewise-constant rate λ(t), and an
arrival each time the cumulative intensity Λ(t) = ∫λ crosses the next mark. Marks spaced by 1 give
evenly spaced (deterministic) arrivals; marks spaced by Exp(1) draws give a Poisson process (the
time-rescaling theorem), so a Poisson spike is exactly a Poisson process whose rate steps. Marks
spaced by Gamma(k, 1/k) draws (mean 1, coefficient of variation 1/sqrt(k)) give a renewal process
burstier than Poisson for k < 1 under the same rate curve: how a synthesized trace gets its bursts.

The spike shapes (:class:`SpikeArrivals`, :class:`RampArrivals`, :class:`WaveArrivals`,
:class:`BurstTrainArrivals`, :class:`TraceArrivals`) each give their rate curve as segments and the
windows in which the load is raised (``peak_windows``), so that a bench can score "during the spike".
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Annotated, Literal

from pydantic import BaseModel, Field


def piecewise(
    segments: Sequence[tuple[float, float]], rng: random.Random | None, gamma_shape: float = 1.0
) -> Iterator[float]:
    """Arrivals under a piecewise-constant rate.

    ``segments`` are ``(start_s, rate)`` pairs sorted by start, the first starting at 0; the last
    rate holds forever. With ``rng`` the process is Poisson (``gamma_shape`` 1) or a Gamma renewal
    process of that shape (burstier below 1), without it arrivals are evenly spaced (the first at
    t=0). A process whose last rate is 0 ends.
    """
    if not segments or segments[0][0] != 0.0:
        raise ValueError("segments must start at t=0")
    if any(b[0] < a[0] for a, b in itertools.pairwise(segments)):
        raise ValueError("segments must be sorted by start time")
    if any(rate < 0 for _, rate in segments):
        raise ValueError("rates must be >= 0")

    if gamma_shape <= 0:
        raise ValueError("gamma_shape must be > 0")

    def next_mark() -> float:
        if rng is None:
            return 1.0
        return rng.expovariate(1.0) if gamma_shape == 1.0 else rng.gammavariate(gamma_shape, 1.0 / gamma_shape)

    # Arrival k happens when the cumulative intensity reaches mark k. Times are computed from the
    # start of the current segment (not by adding gaps), so evenly spaced arrivals land exactly on
    # k / rate; segments are half-open, so an arrival at a boundary belongs to the later segment.
    mark = next_mark() if rng is not None else 0.0  # a deterministic first arrival at t=0
    intensity_at_start = 0.0
    for index, (start, rate) in enumerate(segments):
        end = segments[index + 1][0] if index + 1 < len(segments) else math.inf
        while rate > 0 and (t := start + (mark - intensity_at_start) / rate) < end:
            yield t
            mark += next_mark()
        intensity_at_start += (end - start) * rate if end != math.inf else 0.0


def constant(rate: float) -> Iterator[float]:
    """Evenly spaced arrivals at ``rate`` per second, the first at t=0."""
    return piecewise([(0.0, rate)], None)


def poisson(rate: float, rng: random.Random) -> Iterator[float]:
    """A Poisson process of ``rate`` per second (exponential gaps)."""
    return piecewise([(0.0, rate)], rng)


def step_spike(
    base_rate: float,
    spike_rate: float,
    start_s: float,
    duration_s: float,
    rng: random.Random | None,
) -> Iterator[float]:
    """``base_rate`` until ``start_s``, ``spike_rate`` for ``duration_s``, then ``base_rate`` again."""
    segments = [(0.0, base_rate), (start_s, spike_rate), (start_s + duration_s, base_rate)]
    if start_s == 0.0:
        segments = segments[1:]
    return piecewise(segments, rng)


def bursts(size: int, period_s: float) -> Iterator[float]:
    """``size`` simultaneous arrivals every ``period_s`` seconds, the first burst at t=0."""
    k = 0
    while True:
        for _ in range(size):
            yield k * period_s
        k += 1


def replay(timestamps: Iterable[float], speedup: float = 1.0) -> Iterator[float]:
    """A trace's timestamps shifted so that the first is t=0, and compressed ``speedup`` times."""
    first: float | None = None
    for ts in timestamps:
        if first is None:
            first = ts
        yield (ts - first) / speedup


class ConstantArrivals(BaseModel):
    kind: Literal["constant"] = "constant"
    rate: float = Field(gt=0, description="Requests per second, evenly spaced.")


class PoissonArrivals(BaseModel):
    kind: Literal["poisson"] = "poisson"
    rate: float = Field(gt=0, description="Mean requests per second; gaps are exponential.")


class BurstArrivals(BaseModel):
    kind: Literal["bursts"] = "bursts"
    size: int = Field(ge=1, description="Requests sent at the same instant in each burst.")
    period_s: float = Field(gt=0, description="Seconds from one burst to the next.")


Window = tuple[float, float]


def sampled(rate_at: Callable[[float], float], end_s: float, step_s: float) -> list[tuple[float, float]]:
    """A smooth rate curve as segments of ``step_s``, each at the curve's rate at its middle; 0 after ``end_s``."""
    n = max(1, math.ceil(end_s / step_s - 1e-9))
    segments = [(k * step_s, max(0.0, rate_at(min((k + 0.5) * step_s, end_s)))) for k in range(n)]
    return [*segments, (n * step_s, 0.0)]


class SpikeArrivals(BaseModel):
    """A step: ``base_rate``, then ``spike_rate`` for ``duration_s``, then ``base_rate`` again."""

    kind: Literal["spike"] = "spike"
    base_rate: float = Field(ge=0, description="Requests per second outside the spike.")
    spike_rate: float = Field(ge=0, description="Requests per second during the spike.")
    start_s: float = Field(ge=0, description="Seconds from the start of the run to the spike.")
    duration_s: float = Field(gt=0, description="How long the spike lasts, in seconds.")
    poisson: bool = Field(True, description="Poisson arrivals at the current rate; else evenly spaced.")

    def segments(self) -> list[tuple[float, float]]:
        segments = [
            (0.0, self.base_rate),
            (self.start_s, self.spike_rate),
            (self.start_s + self.duration_s, self.base_rate),
        ]
        return segments[1:] if self.start_s == 0.0 else segments

    def peak_windows(self) -> list[Window]:
        return [(self.start_s, self.start_s + self.duration_s)]

    @property
    def peak_rate(self) -> float:
        return max(self.base_rate, self.spike_rate)


class RampArrivals(BaseModel):
    """``base_rate``, a linear ramp up to ``peak_rate`` over ``ramp_s``, a hold, the same ramp down, ``base_rate``."""

    kind: Literal["ramp"] = "ramp"
    base_rate: float = Field(ge=0, description="Requests per second before and after the ramp.")
    peak_rate: float = Field(gt=0, description="Requests per second at the top of the ramp.")
    start_s: float = Field(ge=0, description="When the ramp up begins.")
    ramp_s: float = Field(gt=0, description="Seconds from base to peak (and back down).")
    hold_s: float = Field(0.0, ge=0, description="Seconds held at the peak.")
    step_s: float = Field(2.0, gt=0, description="The ramp is a staircase of steps this long.")

    def rate_at(self, t: float) -> float:
        up, top, down = self.start_s, self.start_s + self.ramp_s, self.start_s + self.ramp_s + self.hold_s
        if t < up or t >= down + self.ramp_s:
            return self.base_rate
        if t < top:
            return self.base_rate + (self.peak_rate - self.base_rate) * (t - up) / self.ramp_s
        if t < down:
            return self.peak_rate
        return self.peak_rate - (self.peak_rate - self.base_rate) * (t - down) / self.ramp_s

    def segments(self) -> list[tuple[float, float]]:
        end = self.start_s + 2 * self.ramp_s + self.hold_s
        ramp = sampled(lambda t: self.rate_at(t + self.start_s), end - self.start_s, self.step_s)[:-1]
        head = [(0.0, self.base_rate)] if self.start_s > 0 else []
        return [*head, *((t + self.start_s, r) for t, r in ramp), (end, self.base_rate)]

    def peak_windows(self) -> list[Window]:
        return [(self.start_s, self.start_s + 2 * self.ramp_s + self.hold_s)]


class WaveArrivals(BaseModel):
    """A diurnal wave compressed in time: from ``low_rate`` up to ``high_rate`` and back once per ``period_s``.

    rate(t) = low + (high - low) * ((1 - cos(2 pi t / period)) / 2) ** sharpness, starting at the trough.
    ``sharpness`` 1 is a sine; above 1 the peak is narrower than the trough, as a working day's is.
    """

    kind: Literal["wave"] = "wave"
    low_rate: float = Field(ge=0, description="Requests per second at the trough.")
    high_rate: float = Field(gt=0, description="Requests per second at the crest.")
    period_s: float = Field(gt=0, description="Seconds from one trough to the next (a day, compressed).")
    cycles: float = Field(1.0, gt=0, description="How many periods the run lasts.")
    sharpness: float = Field(
        1.0, ge=1, description="Exponent on the raised cosine: 1 sine-like, larger a narrower peak."
    )
    step_s: float = Field(2.0, gt=0, description="The wave is a staircase of steps this long.")

    def rate_at(self, t: float) -> float:
        phase = (1.0 - math.cos(2.0 * math.pi * t / self.period_s)) / 2.0
        return self.low_rate + (self.high_rate - self.low_rate) * phase**self.sharpness

    def segments(self) -> list[tuple[float, float]]:
        return sampled(self.rate_at, self.period_s * self.cycles, self.step_s)

    def peak_windows(self) -> list[Window]:
        """Where the rate is above the middle of low and high: the crest of each period."""
        half = 0.5 ** (1.0 / self.sharpness)  # phase at which the raised cosine reaches half of the swing
        offset = math.acos(1.0 - 2.0 * half) / (2.0 * math.pi) * self.period_s
        windows = []
        k = 0
        while k < self.cycles:
            windows.append((k * self.period_s + offset, (k + 1) * self.period_s - offset))
            k += 1
        return windows


class BurstTrainArrivals(BaseModel):
    """``base_rate`` with ``count`` bursts at ``burst_rate``, each ``burst_s`` long, ``gap_s`` apart."""

    kind: Literal["burst_train"] = "burst_train"
    base_rate: float = Field(ge=0, description="Requests per second between bursts.")
    burst_rate: float = Field(gt=0, description="Requests per second within a burst.")
    start_s: float = Field(ge=0, description="When the first burst begins.")
    burst_s: float = Field(gt=0, description="How long each burst lasts.")
    gap_s: float = Field(gt=0, description="Seconds at base_rate between one burst's end and the next one's start.")
    count: int = Field(ge=1, description="Bursts in the train.")

    def peak_windows(self) -> list[Window]:
        period = self.burst_s + self.gap_s
        return [(self.start_s + k * period, self.start_s + k * period + self.burst_s) for k in range(self.count)]

    def segments(self) -> list[tuple[float, float]]:
        segments = [(0.0, self.base_rate)]
        for start, end in self.peak_windows():
            segments += [(start, self.burst_rate), (end, self.base_rate)]
        return segments[1:] if self.start_s == 0.0 else segments


class TraceArrivals(BaseModel):
    """A trace synthesized from published statistics: a compressed diurnal wave under Gamma-renewal arrivals.

    BurstGPT (Wang et al., arXiv 2401.17644: 10.31 M requests of Azure OpenAI GPT services over 213 days) fits
    request inter-arrival times with Gamma distributions whose burstiness varies by service, and reports the
    daily periodicity of conversation traffic; its BurstGPT-Perf generator models arrivals the same way. Here:
    the rate follows a wave (``wave``) and the gaps are Gamma draws of shape ``gamma_shape`` (coefficient of
    variation 1/sqrt(shape); below 1 burstier than Poisson). The shape is this bench's choice inside the
    bursty range the paper describes, not a value fitted to its data (which this machine cannot fetch).
    """

    kind: Literal["trace"] = "trace"
    wave: WaveArrivals = Field(description="The rate curve the bursts ride on.")
    gamma_shape: float = Field(
        0.5, gt=0, description="Shape k of the Gamma inter-arrival marks (mean 1, CV 1/sqrt(k))."
    )

    def segments(self) -> list[tuple[float, float]]:
        return self.wave.segments()

    def peak_windows(self) -> list[Window]:
        return self.wave.peak_windows()


SpikeShape = SpikeArrivals | RampArrivals | WaveArrivals | BurstTrainArrivals | TraceArrivals

ArrivalSpec = Annotated[
    ConstantArrivals | PoissonArrivals | BurstArrivals | SpikeShape,
    Field(discriminator="kind"),
]


def arrival_times(spec: ArrivalSpec, seed: int) -> Iterator[float]:
    """The send times that ``spec`` describes; the same seed gives the same times."""
    # A string seed is hashed (sha512) by random.Random: a stream of its own, independent of the
    # streams that draw lengths and tiers, so changing a length distribution keeps the arrivals.
    rng = random.Random(f"{seed}:arrivals")
    match spec:
        case ConstantArrivals():
            return constant(spec.rate)
        case PoissonArrivals():
            return poisson(spec.rate, rng)
        case BurstArrivals():
            return bursts(spec.size, spec.period_s)
        case SpikeArrivals():
            return step_spike(
                spec.base_rate,
                spec.spike_rate,
                spec.start_s,
                spec.duration_s,
                rng if spec.poisson else None,
            )
        case TraceArrivals():
            return piecewise(spec.segments(), rng, spec.gamma_shape)
        case RampArrivals() | WaveArrivals() | BurstTrainArrivals():
            return piecewise(spec.segments(), rng)
    raise TypeError(f"unknown arrival spec {spec!r}")
