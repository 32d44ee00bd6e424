"""How fast this host runs plain Python at the moment: a yardstick for runs compared across an hour or a day.

The 2-core machine's speed drifts (its neighbours, its host's clock): one interleaved A/B ran about 20%
more CPU per token in its second pair, on both trees alike, in every process. A run that records how long a fixed
pure-Python workload takes, while nothing else of the bench runs, shows such an hour in its own JSON instead of
leaving the reader to infer it from the numbers it is meant to judge.
"""

from __future__ import annotations

import statistics
import timeit

_WORKLOAD = "sum(i * i for i in range(20_000))"  # ~1 ms of one core: interpreter work, no allocation to speak of


def python_ms(repeats: int = 7) -> float:
    """Median milliseconds of the fixed workload over ``repeats`` runs (the median: one preemption is not a trend)."""
    return statistics.median(timeit.repeat(_WORKLOAD, number=1, repeat=repeats)) * 1e3
