"""Arrival processes: pure, seeded generators of send times (seconds from the start of a run).

The generators are infinite (a replayed trace is as long as its trace); the load generator stops
at its own count and time bounds. They take no clock and do no I/O, so shapes are testable exactly
and the simulator can reuse them.

Every rate-driven process is one idea, :func:`piecewise`: a piecewise-constant rate λ(t), and an
arrival each time the cumulative intensity Λ(t) = ∫λ crosses the next mark. Marks spaced by 1 give
evenly spaced (deterministic) arrivals; marks spaced by Exp(1) draws give a Poisson process (the
time-rescaling theorem), so a Poisson spike is exactly a Poisson process whose rate steps.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterable, Iterator, Sequence
from typing import Annotated, Literal

from pydantic import BaseModel, Field


def piecewise(segments: Sequence[tuple[float, float]], rng: random.Random | None) -> Iterator[float]:
    """Arrivals under a piecewise-constant rate.

    ``segments`` are ``(start_s, rate)`` pairs sorted by start, the first starting at 0; the last
    rate holds forever. With ``rng`` the process is Poisson, without it arrivals are evenly spaced
    (the first at t=0). A process whose last rate is 0 ends.
    """
    if not segments or segments[0][0] != 0.0:
        raise ValueError("segments must start at t=0")
    if any(b[0] < a[0] for a, b in itertools.pairwise(segments)):
        raise ValueError("segments must be sorted by start time")
    if any(rate < 0 for _, rate in segments):
        raise ValueError("rates must be >= 0")

    def next_mark() -> float:
        return rng.expovariate(1.0) if rng is not None else 1.0

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


class SpikeArrivals(BaseModel):
    kind: Literal["spike"] = "spike"
    base_rate: float = Field(ge=0, description="Requests per second outside the spike.")
    spike_rate: float = Field(ge=0, description="Requests per second during the spike.")
    start_s: float = Field(ge=0, description="Seconds from the start of the run to the spike.")
    duration_s: float = Field(gt=0, description="How long the spike lasts, in seconds.")
    poisson: bool = Field(True, description="Poisson arrivals at the current rate; else evenly spaced.")


ArrivalSpec = Annotated[ConstantArrivals | PoissonArrivals | BurstArrivals | SpikeArrivals, Field(discriminator="kind")]


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
    raise TypeError(f"unknown arrival spec {spec!r}")
