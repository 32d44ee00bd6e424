"""Block reuse and KV cache events as TensorRT-LLM's KV cache manager does them, for both fakes (not the real one).

Faithful where the adapters depend on it, each from the TensorRT-LLM source:

* events are dicts as ``KVCacheEventSerializer.to_json_str`` writes them (``tensorrt_llm/_utils.py``), numbered one
  by one (``event_id``), with the attention window (``window_size``); ``created`` when the cache is made, then
  ``stored`` (the first new block's parent hash, None at the root; each block's own hash and its tokens) and
  ``removed`` (consecutive removals in one event), as ``cpp/tensorrt_llm/batch_manager/kvCacheEventManager.cpp``
  enqueues them; only with ``event_buffer_max_size > 0`` and ``enable_block_reuse`` (llm.py
  ``get_kv_cache_events``), and a full buffer discards its oldest events;
* a sequence's blocks are chained: a block is found again only after the same earlier blocks; its hash is
  TensorRT-LLM's own (here a salted hash of the parent's hash and the tokens, an unsigned 64-bit number the
  adapters must not rely on);
* a finished context stores all its blocks, the last partial one too (``enable_partial_reuse``, on by default);
  reuse takes whole blocks only, and never the prompt's last token, which the first output needs;
* beyond its capacity the cache evicts the least recently used blocks that no other block continues (leaves).

What a fake cannot prove: the real hash function, when exactly the engine stores (TensorRT-LLM stores a context's
blocks once it is prefilled and the generated tokens' blocks when the request ends; the fakes store the prompt's
only, when the first token comes), partial-block reuse, host offloading (``cache_level``) and ``updated`` events.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict, deque
from typing import Any

WINDOW_SIZE = 4096  # the attention window the events name (max_seq_len here: no sliding window layers)
_SALT = 0x7472746C6C6D  # keeps the fake's block hashes apart from the router's


def trtllm_block_hash(parent: int | None, tokens: tuple[int, ...]) -> int:
    return hash((_SALT, parent or 0, tokens)) & (2**64 - 1)


class FakeKvCache:
    def __init__(
        self,
        tokens_per_block: int = 32,
        capacity_blocks: int = 1000,
        event_buffer_max_size: int = 0,
        enable_block_reuse: bool = True,
    ) -> None:
        self.tokens_per_block = tokens_per_block
        self.capacity_blocks = capacity_blocks
        self.reuse = enable_block_reuse
        self.buffer = event_buffer_max_size if enable_block_reuse else 0
        self.events: deque[dict[str, Any]] = deque()  # what the next read takes
        self.discarded = 0
        self._ids = itertools.count()
        self._blocks: OrderedDict[int, int | None] = OrderedDict()  # hash -> parent hash, least recently used first
        self._children: dict[int, int] = {}  # hash -> blocks continuing it
        self._emit({"type": "created", "num_blocks_per_cache_level": [capacity_blocks, 0]})

    def _emit(self, data: dict[str, Any]) -> None:
        if self.buffer <= 0:
            return
        if data["type"] == "removed" and self.events and self.events[-1]["data"]["type"] == "removed":
            self.events[-1]["data"]["block_hashes"].extend(data["block_hashes"])  # enqueueRemovedEvent batches
            return
        self.events.append({"event_id": next(self._ids), "data": data, "window_size": WINDOW_SIZE})
        while len(self.events) > self.buffer:  # "Events have been discarded"
            self.events.popleft()
            self.discarded += 1

    def _chain(self, tokens: list[int]) -> list[tuple[int, int | None, tuple[int, ...]]]:
        """``(hash, parent hash, tokens)`` of each block of ``tokens``, the partial last one included."""
        out: list[tuple[int, int | None, tuple[int, ...]]] = []
        parent: int | None = None
        for start in range(0, len(tokens), self.tokens_per_block):
            block = tuple(tokens[start : start + self.tokens_per_block])
            h = trtllm_block_hash(parent, block)
            out.append((h, parent, block))
            parent = h
        return out

    def reused_tokens(self, prompt: list[int]) -> int:
        """Prompt tokens a new request takes from the cache (whole blocks, never the last token)."""
        if not self.reuse:
            return 0
        matched = 0
        for h, _, block in self._chain(prompt):
            if len(block) < self.tokens_per_block or h not in self._blocks:
                break
            self._blocks.move_to_end(h)
            matched += 1
        return max(0, min(matched * self.tokens_per_block, len(prompt) - 1))

    def store(self, prompt: list[int]) -> None:
        """Stores a prefilled context's blocks: one ``stored`` event for the new ones, then evictions."""
        if not self.reuse:
            return
        new: list[tuple[int, int | None, tuple[int, ...]]] = []
        for h, parent, block in self._chain(prompt):
            if h in self._blocks:
                self._blocks.move_to_end(h)
                continue
            self._blocks[h] = parent
            if parent is not None:
                self._children[parent] = self._children.get(parent, 0) + 1
            new.append((h, parent, block))
        if new:
            self._emit(
                {
                    "type": "stored",
                    "parent_hash": new[0][1],
                    "blocks": [
                        {
                            "type": "stored_block",
                            "block_hash": h,
                            "tokens": [{"type": "unique_token", "token_id": t, "token_extra_id": 0} for t in block],
                            "cache_level": 0,
                            "priority": 35,
                        }
                        for h, _, block in new
                    ],
                }
            )
        self._evict()

    def _evict(self) -> None:
        while len(self._blocks) > self.capacity_blocks:
            leaf = next(h for h in self._blocks if not self._children.get(h))
            parent = self._blocks.pop(leaf)
            if parent is not None:
                self._children[parent] -= 1
            self._emit({"type": "removed", "block_hashes": [leaf]})

    def take_events(self) -> list[dict[str, Any]]:
        events = list(self.events)
        self.events.clear()
        return events
