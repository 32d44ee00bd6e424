"""How long a new replica takes to start on one Ray node: its worker process, queued, then its engine's cold start.

A Ray node starts worker processes at most ``maximum_startup_concurrency`` at a time (``min(cores, logical CPUs)``:
``ray/_private/services.py``, 2.60), and each costs seconds of CPU (importing Ray, Serve and the app) before the
replica's constructor (the engine's cold start) runs. So the replicas of one scale-up do not arrive together
after a mean start-up: the first come after one process start, the rest one process start later per
``concurrency`` of them. A uniform extra start-up (their mean for every replica) turns such a staggered batch
into replicas all at once: the simulator then has capacity the real stack did not, and overrates attainment
on a step (docs/measurements.md has the run that showed it).

:class:`ProcessStarts` is that queue in virtual time; :func:`fit_process_starts` finds the per-process time
and the rest of its start that reproduce the measured starts of a real run (their decision times and their
time beyond the constructor, from Serve's controller log). Pure: no Ray.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass


class ProcessStarts:
    """One node's worker-process starts: at most ``concurrency`` at once, ``process_s`` each, first come first served.

    Stateful in virtual time: ask in the order of the decisions (the simulator's clock only moves forward).
    """

    def __init__(self, concurrency: int, process_s: float, after_s: float = 0.0) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if process_s < 0 or after_s < 0:
            raise ValueError(f"process_s and after_s must be >= 0, got {process_s}, {after_s}")
        self.concurrency = concurrency
        self.process_s = process_s
        self.after_s = after_s
        self._free_at: list[float] = [float("-inf")] * concurrency  # when each start slot is free again (a heap)

    def process_ready_s(self, now: float) -> float:
        """When a worker process asked for at ``now`` has started (its replica's constructor begins then)."""
        began = max(now, heapq.heappop(self._free_at))
        done = began + self.process_s
        heapq.heappush(self._free_at, done)
        return done + self.after_s


@dataclass(frozen=True, slots=True)
class MeasuredStart:
    """One replica start of a real run: when the controller decided it and how long it took beyond its constructor."""

    decided_s: float  # any clock, the same for every start of the run
    overhead_s: float  # start-up less the replica's constructor and first health check


def predicted_overheads(starts: Sequence[MeasuredStart], queue: ProcessStarts) -> list[float]:
    """Each start's time beyond its constructor under ``queue`` (fresh; in ``starts``' order)."""
    order = sorted(range(len(starts)), key=lambda i: starts[i].decided_s)
    out = [0.0] * len(starts)
    for i in order:
        out[i] = queue.process_ready_s(starts[i].decided_s) - starts[i].decided_s
    return out


@dataclass(frozen=True, slots=True)
class StartFit:
    """The queue that reproduces a run's measured starts best, and how well (root mean square error)."""

    concurrency: int
    process_s: float
    after_s: float
    rms_error_s: float

    def queue(self) -> ProcessStarts:
        return ProcessStarts(self.concurrency, self.process_s, self.after_s)


def _batches(starts: Sequence[MeasuredStart], batch_s: float) -> list[list[int]]:
    """Indices of ``starts`` grouped into scale-ups: decisions within ``batch_s`` of their batch's first."""
    batches: list[list[int]] = []
    for i in sorted(range(len(starts)), key=lambda i: starts[i].decided_s):
        if batches and starts[i].decided_s - starts[batches[-1][0]].decided_s <= batch_s:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def fit_process_starts(
    starts: Sequence[MeasuredStart],
    concurrency: int,
    *,
    step_s: float = 0.1,
    max_s: float = 10.0,
    batch_s: float = 1.0,
) -> StartFit | None:
    """The queue's ``process_s`` (gated, ``concurrency`` at a time) and ``after_s`` (the rest of the process start,
    in parallel) that reproduce ``starts``' overheads best (least squares, each on a grid of ``step_s`` up to
    ``max_s``); None without starts.

    The replicas of one scale-up (decided within ``batch_s``) are compared in rank order, shortest with shortest:
    Serve adds them in one go and which of them Ray starts first is not the order of the log's decision times
    (a batch of four measured 9.7, 7.3, 7.0 and 9.4 s in that order). A grid, not a solver: the error is a step
    function of the times (a start moves from one slot to another), and 10,000 points over a run's few dozen
    starts take about a second."""
    if not starts:
        return None
    batches = _batches(starts, batch_s)
    measured = [sorted(starts[i].overhead_s for i in batch) for batch in batches]
    steps = int(max_s / step_s) + 1
    best: tuple[float, float, float] | None = None
    for i in range(steps):
        for j in range(steps):
            gated, after = i * step_s, j * step_s
            predicted = predicted_overheads(starts, ProcessStarts(concurrency, gated, after))
            error = sum(
                (p - m) ** 2
                for batch, wanted in zip(batches, measured, strict=True)
                for p, m in zip(sorted(predicted[k] for k in batch), wanted, strict=True)
            )
            if best is None or error < best[0] - 1e-9:
                best = (error, gated, after)
    assert best is not None
    error, gated, after = best
    return StartFit(concurrency, round(gated, 3), round(after, 3), round((error / len(starts)) ** 0.5, 3))
