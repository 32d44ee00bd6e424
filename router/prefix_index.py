"""Which replica of a variant holds which prompt blocks: the router's view of the engines' prefix caches.

What a request costs a replica is the part of its prompt that replica has not cached, so the router keeps, per
variant, the chained block hashes (``engines/kv_blocks.py``) each replica holds, from one of two sources:

* **precise**: the replica's engine reports what its cache stored and removed (TensorRT-LLM's KV cache events,
  the emulated engine's and the simulator's in the same shape), relayed by the stats board; the index then knows
  what the engine holds, as of the last report;
* **approximate**: an engine that tells nothing (transformers here, a remote server without events) is assumed to
  hold what the router sent it, for ``ttl_s`` and at most ``capacity_blocks`` a replica, least recently sent
  first out; a replica that ever reported events is never guessed at again.

A replica holds a block only with every block before it (engines reuse along a prefix and evict leaves first),
so a prompt's cached length on a replica is found by bisection over its block hashes: a few set lookups per
replica, whatever the prompt's length. Pure: no Ray, no clock of its own (callers pass ``now``); the ingress and
the simulator keep one per variant.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from router.replica_backlog import best_cached

# The default bound of the approximate index, per replica: a GPU replica holds tens of thousands of blocks.
DEFAULT_CAPACITY_BLOCKS = 1 << 16
DEFAULT_TTL_S = 300.0


def matched_blocks(held: Collection[int], hashes: Sequence[int]) -> int:
    """How many leading blocks of ``hashes`` are in ``held``, given that a held block's ancestors are held."""
    lo, hi = 0, len(hashes)  # the first ``lo`` are held; none after ``hi``
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if hashes[mid - 1] in held:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(frozen=True, slots=True)
class IndexSize:
    """What an index holds, for the metrics: blocks over all replicas, by source."""

    precise_blocks: int
    approximate_blocks: int
    replicas: int

    @property
    def blocks(self) -> int:
        return self.precise_blocks + self.approximate_blocks


class PrefixIndex:
    """One variant's replicas and the prompt blocks each holds (see the module docstring)."""

    def __init__(
        self,
        block_tokens: int,
        *,
        capacity_blocks: int = DEFAULT_CAPACITY_BLOCKS,
        ttl_s: float = DEFAULT_TTL_S,
    ) -> None:
        if block_tokens < 1:
            raise ValueError("block_tokens must be >= 1")
        self.block_tokens = block_tokens
        self.capacity_blocks = capacity_blocks
        self.ttl_s = ttl_s
        self._precise: dict[str, set[int]] = {}
        # replica -> block -> when last sent there, oldest first (a prompt's root last: it outlives its leaves)
        self._approximate: dict[str, OrderedDict[int, float]] = {}

    # ------------------------------------------------------------------ what the replicas hold

    def apply(self, replica: str, stored: Iterable[int], removed: Iterable[int], *, cleared: bool = False) -> None:
        """A replica's engine reported its cache's changes: from now on the index knows it precisely."""
        self._approximate.pop(replica, None)
        blocks = self._precise.setdefault(replica, set())
        if cleared:
            blocks.clear()
        blocks.difference_update(removed)
        blocks.update(stored)

    def note_routed(self, replica: str, hashes: Sequence[int], now: float) -> None:
        """The router sent a prompt with these blocks to ``replica``: where its engine reports nothing, assume the
        replica holds them from now on (for ``ttl_s``)."""
        if replica in self._precise or not hashes:
            return
        sent = self._approximate.setdefault(replica, OrderedDict())
        for h in reversed(hashes):  # the root last: the most recently sent, the last to go
            sent[h] = now
            sent.move_to_end(h)
        self._expire(sent, now)

    def _expire(self, sent: OrderedDict[int, float], now: float) -> None:
        horizon = now - self.ttl_s
        while sent and (len(sent) > self.capacity_blocks or next(iter(sent.values())) < horizon):
            sent.popitem(last=False)

    def retain(self, replicas: Collection[str]) -> None:
        """Forgets every replica not in ``replicas`` (stopped, dead, or gone from the stats board)."""
        for table in (self._precise, self._approximate):
            for gone in [r for r in table if r not in replicas]:
                del table[gone]

    def is_precise(self, replica: str) -> bool:
        return replica in self._precise

    # ------------------------------------------------------------------ what a prompt would find

    def cached_blocks(self, replica: str, hashes: Sequence[int], now: float) -> int:
        """Leading blocks of a prompt with these hashes that ``replica`` holds (0 for one the index never saw)."""
        held = self._precise.get(replica)
        if held is not None:
            return matched_blocks(held, hashes)
        sent = self._approximate.get(replica)
        if not sent:
            return 0
        self._expire(sent, now)
        return matched_blocks(sent, hashes)

    def cached_tokens(self, hashes: Sequence[int], prompt_tokens: int, now: float) -> dict[str, int]:
        """Prompt tokens each known replica would take from its cache (never the prompt's last one), where any.

        Called per request for every variant: a replica that lacks the prompt's first block (most of them) costs
        one set lookup; only the others are bisected."""
        out: dict[str, int] = {}
        if not hashes:
            return out
        first = hashes[0]
        for replica, held in self._precise.items():
            if first in held:
                out[replica] = matched_blocks(held, hashes)
        for replica, sent in self._approximate.items():
            self._expire(sent, now)
            if first in sent:
                out[replica] = matched_blocks(sent, hashes)
        if out:
            block, limit = self.block_tokens, max(prompt_tokens - 1, 0)
            for replica, blocks in out.items():
                out[replica] = min(blocks * block, limit)
        return out

    def size(self) -> IndexSize:
        return IndexSize(
            precise_blocks=sum(len(b) for b in self._precise.values()),
            approximate_blocks=sum(len(b) for b in self._approximate.values()),
            replicas=len(self._precise) + len(self._approximate),
        )


@dataclass(slots=True)
class PrefixMatch:
    """What the variants' replicas hold of one prompt: per variant, the cached tokens on each replica that holds any
    (``cached``) and on the variant's best replica for it (``best``: the least prefill ahead, cache left out)."""

    cached: dict[str, dict[str, int]] = field(default_factory=dict)
    best: dict[str, int] = field(default_factory=dict)


def match_prompt(
    indexes: Mapping[str, PrefixIndex],
    hashes: Mapping[int, Sequence[int]],
    prompt_tokens: int,
    backlogs: Callable[[str], Mapping[str, float]],
    now: float,
) -> PrefixMatch:
    """The prompt (its block hashes per block size) against every variant's index; ``backlogs(variant)``: each of
    its replicas' unprefilled prompt tokens, for its best replica (asked only of variants holding some)."""
    match = PrefixMatch()
    for name, index in indexes.items():
        cached = index.cached_tokens(hashes.get(index.block_tokens, ()), prompt_tokens, now)
        if cached:
            match.cached[name] = cached
            match.best[name] = best_cached(backlogs(name), cached, prompt_tokens)
    return match
