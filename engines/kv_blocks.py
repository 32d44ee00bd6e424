"""KV cache blocks as the router and the engines name them: chained hashes of whole blocks of prompt tokens.

A block's hash covers its own tokens and, through its parent's hash, every token before it, so two prompts share
the hash of block ``i`` exactly when they share their first ``(i + 1) * block_tokens`` tokens; a replica that holds
block ``i`` of a prompt holds its prefix up to there (engines reuse blocks along a prefix, and evict leaves first).
Only whole blocks count: an engine reuses no partial block, and a tail shorter than a block is always prefilled.

The hash is Python's ``hash`` of an int tuple, which is not randomized per process (only ``str`` and ``bytes``
are): the ingress that hashes a prompt and the engine process that hashes the same tokens agree. TensorRT-LLM's
own block hashes are not needed: its KV cache events carry each stored block's tokens
(``tensorrt_llm/_utils.py``, ``KVCacheEventSerializer``), which the adapters hash here the same way.

What an engine says about its cache is a :class:`KvEvents` batch: its net effect since the last one, the blocks
removed and the blocks stored (now reusable), applied in that order; ``cleared`` says the replica's cache was
emptied first (a start or restart), so whatever a reader held for it is void.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

ROOT_HASH = 0  # the parent of a prompt's first block


def chain_hash(parent: int, block: Sequence[int]) -> int:
    """The hash of one whole block of tokens after the block whose hash is ``parent``."""
    return hash((parent, tuple(block)))


def block_hashes(token_ids: Sequence[int], block_tokens: int, parent: int = ROOT_HASH) -> list[int]:
    """The chained hashes of the whole ``block_tokens`` blocks of ``token_ids`` (a partial tail has none)."""
    out: list[int] = []
    h = parent
    for start in range(0, len(token_ids) - block_tokens + 1, block_tokens):
        h = chain_hash(h, token_ids[start : start + block_tokens])
        out.append(h)
    return out


def reusable_tokens(matched_blocks: int, block_tokens: int, prompt_tokens: int) -> int:
    """Prompt tokens an engine skips when ``matched_blocks`` leading blocks are cached: never the last one, whose
    logits the first output token needs (TensorRT-LLM and vLLM both recompute it)."""
    return max(0, min(matched_blocks * block_tokens, prompt_tokens - 1))


@dataclass(slots=True)
class KvEvents:
    """What one engine replica's KV cache did since its last batch, as its net effect: the state after it is the
    state before, emptied if ``cleared``, less ``removed``, plus ``stored`` (disjoint from ``removed``)."""

    stored: set[int] = field(default_factory=set)
    removed: set[int] = field(default_factory=set)
    cleared: bool = False

    def __bool__(self) -> bool:
        return bool(self.stored or self.removed or self.cleared)

    def store(self, block: int) -> None:
        self.removed.discard(block)
        self.stored.add(block)

    def remove(self, block: int) -> None:
        self.stored.discard(block)
        self.removed.add(block)

    def clear(self) -> None:
        self.stored.clear()
        self.removed.clear()
        self.cleared = True

    def extend(self, later: KvEvents) -> None:
        """Folds a later batch into this one."""
        if later.cleared:
            self.clear()
        for block in later.removed:
            self.remove(block)
        for block in later.stored:
            self.store(block)

    def apply_to(self, blocks: set[int]) -> None:
        """Applies this batch to a reader's copy of the replica's blocks."""
        if self.cleared:
            blocks.clear()
        blocks.difference_update(self.removed)
        blocks.update(self.stored)
