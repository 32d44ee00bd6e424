"""How much of a workload a prefix cache could serve at all: the hit rate of one cache that never forgets.

Every request's leading blocks that some earlier request already had are hits (a cache holds a block only with its
whole prefix, so matching stops at the first miss). No real fleet does better: it has bounded caches, and a
request that lands on a replica other than the one holding its prefix misses. Reports set a run's hit rate
against this bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class IdealHits:
    blocks: int  # whole blocks over all requests
    hit_blocks: int  # of them, found in the cache
    per_request: tuple[int, ...]  # each request's hit blocks, in order (e.g. to split first and later turns)

    @property
    def hit_rate(self) -> float:
        """The fraction of whole blocks served from the cache (0 when there are none)."""
        return self.hit_blocks / self.blocks if self.blocks else 0.0


def ideal_prefix_hits(requests: Iterable[Sequence[int]]) -> IdealHits:
    """The hits of an infinite prefix cache over requests' chained block hashes, in arrival order."""
    seen: set[int] = set()
    blocks = 0
    per_request: list[int] = []
    for hashes in requests:
        hits = 0
        while hits < len(hashes) and hashes[hits] in seen:
            hits += 1
        seen.update(hashes[hits:])
        blocks += len(hashes)
        per_request.append(hits)
    return IdealHits(blocks=blocks, hit_blocks=sum(per_request), per_request=tuple(per_request))
