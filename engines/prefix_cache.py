"""Prefix block reuse in one engine replica: which prompt blocks its KV cache holds, and which it gives up.

The one model of block reuse that both clocks share (the simulator's replicas and the emulated engine, through
:class:`engines.batching.ContinuousBatch`), after TensorRT-LLM's KV cache manager (``enable_block_reuse``, on by
default): a finished prompt's whole blocks stay in the cache, keyed by their chained hash
(:mod:`engines.kv_blocks`); a later prompt that starts with the same blocks takes them instead of prefilling
them; blocks no running sequence holds are evicted least recently used, leaves before their parents, when the KV
they occupy is needed.

Capacity is what running sequences have not reserved: the batch admits a request by reserving its whole context
(prompt + max_tokens, GUARANTEED_NO_EVICT), and an unreferenced cached block lives in the rest. Blocks a running
sequence references are inside its reservation and are never evicted. (A real engine counts a block shared by
several running sequences once; this model counts it in each reservation, which admits no more than the engine
would and errs on the side of fewer concurrent sequences when many share a long prefix.)

Every change is recorded as :class:`engines.kv_blocks.KvEvents`, drained by whoever reports the cache (the
emulated engine's stats loop; the simulator's replicas), so the router sees exactly what the engine did.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from engines.kv_blocks import KvEvents, reusable_tokens


class PrefixCache:
    """The cached prompt blocks of one replica: hash -> how many running sequences hold it, in LRU order."""

    def __init__(self, block_tokens: int) -> None:
        if block_tokens < 1:
            raise ValueError("block_tokens must be >= 1")
        self.block_tokens = block_tokens
        self._blocks: OrderedDict[int, int] = OrderedDict()  # oldest first
        self._unreferenced = 0
        self._events = KvEvents(cleared=True)  # a new cache: readers start from empty
        self.hit_tokens = 0  # prompt tokens taken from the cache, since the start
        self.prompt_tokens = 0  # prompt tokens admitted, since the start
        self.evicted_blocks = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block: int) -> bool:
        return block in self._blocks

    @property
    def unreferenced_tokens(self) -> int:
        """KV tokens held by cached blocks no running sequence uses: what :meth:`fit` may give up."""
        return self._unreferenced * self.block_tokens

    def matched_blocks(self, hashes: Sequence[int]) -> int:
        """How many leading blocks of a prompt with these chained hashes the cache holds."""
        blocks = self._blocks
        n = 0
        for h in hashes:
            if h not in blocks:
                break
            n += 1
        return n

    def acquire(self, hashes: Sequence[int], prompt_tokens: int) -> tuple[int, int]:
        """A sequence is admitted: references its cached leading blocks; ``(blocks held, tokens reused)``."""
        held = self.matched_blocks(hashes)
        self._reference(hashes[:held])
        reused = reusable_tokens(held, self.block_tokens, prompt_tokens)
        self.hit_tokens += reused
        self.prompt_tokens += prompt_tokens
        return held, reused

    def store(self, hashes: Sequence[int], held: int) -> int:
        """A sequence's prompt is prefilled: its blocks after the ``held`` ones it referenced become reusable (or
        referenced too, where another sequence stored them meanwhile). Returns the blocks it now holds (all)."""
        blocks = self._blocks
        new = hashes[held:]
        for h in new:
            if h not in blocks:
                blocks[h] = 0
                self._unreferenced += 1
                self._events.store(h)
        self._reference(new)
        return len(hashes)

    def release(self, hashes: Sequence[int], held: int) -> None:
        """A sequence that held its first ``held`` blocks ended: they stay cached, unreferenced when no other holds
        them (evictable by :meth:`fit`)."""
        blocks = self._blocks
        for h in hashes[:held]:
            refs = blocks.get(h)
            if refs is None:
                continue
            blocks[h] = refs - 1
            if refs == 1:
                self._unreferenced += 1

    def fit(self, free_tokens: int) -> None:
        """Evicts unreferenced blocks, least recently used first, until they fit in ``free_tokens`` of KV."""
        if self.unreferenced_tokens <= free_tokens:
            return
        blocks = self._blocks
        for h in list(blocks):
            if self._unreferenced * self.block_tokens <= free_tokens:
                break
            if blocks[h] == 0:
                del blocks[h]
                self._unreferenced -= 1
                self.evicted_blocks += 1
                self._events.remove(h)

    def drain_events(self) -> KvEvents:
        """What changed since the last call (see :class:`engines.kv_blocks.KvEvents`)."""
        events, self._events = self._events, KvEvents()
        return events

    def _reference(self, hashes: Sequence[int]) -> None:
        """Takes a reference on each block and makes it most recently used, the deepest first so that a prompt's
        root is the last of its blocks to go (an orphaned leaf could never match)."""
        blocks = self._blocks
        for h in reversed(hashes):
            refs = blocks[h]
            if refs == 0:
                self._unreferenced -= 1
            blocks[h] = refs + 1
            blocks.move_to_end(h)
