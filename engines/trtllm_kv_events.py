"""TensorRT-LLM's KV cache events as the router's :class:`engines.kv_blocks.KvEvents`.

Both TensorRT-LLM backends read the same events: ``LLM.get_kv_cache_events_async`` in process
(``tensorrt_llm/llmapi/llm.py``), ``POST /kv_cache_events`` from trtllm-serve (``tensorrt_llm/serve/openai_server.py``).
Each is a dict written by ``KVCacheEventSerializer.to_json_str`` (``tensorrt_llm/_utils.py``)::

    {"event_id": int, "data": {...}, "window_size": int, "attention_dp_rank": int}   # the rank only with attention DP
    data = {"type": "created", "num_blocks_per_cache_level": [...]}
         | {"type": "stored", "parent_hash": int | None,
            "blocks": [{"type": "stored_block", "block_hash": int, "cache_level": int, "priority": int,
                        "tokens": [{"type": "unique_token", "token_id": int, "token_extra_id": int}, ...]}, ...]}
         | {"type": "removed", "block_hashes": [int, ...]}
         | {"type": "updated", "block_hash": int, "cache_level": {...}, "priority": {...}}

TensorRT-LLM's block hash is its own function of the tokens (and of LoRA ids, cache salts, multimodal keys), which
the router cannot compute from a prompt. A stored block carries its tokens, so each block is renamed here to our
chained hash (:func:`engines.kv_blocks.chain_hash`, as ``block_hashes`` names a prompt's blocks), with the parent
named through the same map; the router hashes a prompt the same way and the names meet. The map holds exactly the
blocks the engine holds now (a removed block is forgotten), so it is bounded by the KV cache's size.

What the C++ event manager does that shapes this (``cpp/tensorrt_llm/batch_manager/kvCacheEventManager.cpp``):

* ``event_id`` counts up by one per event within one manager (one per attention-DP rank, shared by all attention
  windows); when the buffer (``event_buffer_max_size``) is full the oldest events are discarded ("Events have been
  discarded"). A gap in the ids therefore means lost events: a lost ``removed`` would leave a block here forever,
  so that rank's blocks are all given up (reported removed) and it is rebuilt from the events that follow.
* A ``stored`` event names its first block's parent (``parent_hash``, None at the root of a sequence). A parent we
  do not know (its event was lost, or came before we listened) cannot be named: hashing the blocks as if they
  began a prompt would claim a prefix the engine does not hold, so they are skipped.
* A partial block (fewer tokens than a block; stored with ``enable_partial_reuse``) is never reused by a prompt's
  whole blocks and ends its event's chain, as in Dynamo's publisher (ai-dynamo/dynamo
  ``components/src/dynamo/trtllm/publisher.py``).
* Models with several attention windows (sliding window layers) send events per window; only the largest window's
  blocks say what a prompt can reuse, so events of a smaller window are dropped (Dynamo keeps the largest
  ``window_size`` too). Events without ``window_size`` (older versions) all count.
* With attention data parallelism each rank has its own cache and its own block hashes; the replica holds a block
  while any rank does.

Not told apart: blocks that differ only in what the serializer leaves out (LoRA id, cache salt) name the same
block here; the project serves neither. A block with a non-zero ``token_extra_id`` (multimodal or prompt-table
tokens) is not plain text the router could hash, and ends its chain like a partial one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from engines.kv_blocks import ROOT_HASH, KvEvents, chain_hash

logger = logging.getLogger(__name__)


class TrtllmKvEventTranslator:
    """Feeds on TensorRT-LLM's KV cache events, in order; :meth:`drain` gives what changed since the last drain."""

    def __init__(self, block_tokens: int) -> None:
        if block_tokens < 1:
            raise ValueError("block_tokens must be >= 1")
        self.block_tokens = block_tokens
        self._blocks: dict[tuple[int, int], int] = {}  # (attention-DP rank, TensorRT-LLM hash) -> our hash
        self._refs: dict[int, int] = {}  # our hash -> how many entries of _blocks name it
        self._window: int | None = None  # the largest attention window seen
        self._last_ids: dict[int, int] = {}  # rank -> the last event_id seen
        self._pending = KvEvents(cleared=True)  # a new reader starts from an empty cache
        self._warned_size = False
        self.skipped_orphans = 0  # stored events whose parent we could not name
        self.lost_event_gaps = 0  # gaps in event_id: events TensorRT-LLM discarded or we never read

    def __len__(self) -> int:
        """Blocks the engine holds, by our names (several ranks holding one block count it once)."""
        return len(self._refs)

    def __contains__(self, block: int) -> bool:
        return block in self._refs

    def feed(self, events: Iterable[Any]) -> None:
        for event in events:
            self.feed_one(event)

    def drain(self) -> KvEvents:
        """The net change since the last call (the first one starts with ``cleared``)."""
        batch, self._pending = self._pending, KvEvents()
        return batch

    def feed_one(self, event: Any) -> None:
        # A build without an event manager serializes None events (worker.py dispatch_kv_cache_events_task:
        # ``events_api = lambda: [None]``): nothing to read.
        if not isinstance(event, dict) or not isinstance(event.get("data"), dict):
            return
        data = event["data"]
        kind = data.get("type")
        rank = int(event.get("attention_dp_rank") or 0)
        if kind == "created":
            # A new cache (the engine's start): whatever was known of this engine is void.
            self._blocks.clear()
            self._refs.clear()
            self._last_ids.clear()
            self._pending.clear()
            self._track_id(rank, event.get("event_id"))
            self._keep_window(event)  # learns the windows before any block arrives
            return
        self._track_id(rank, event.get("event_id"))
        if not self._keep_window(event):
            return
        if kind == "stored":
            self._stored(rank, data)
        elif kind == "removed":
            for trt_hash in data.get("block_hashes") or ():
                ours = self._blocks.pop((rank, trt_hash), None)
                if ours is not None:  # else a partial, skipped or unknown block
                    self._unref(ours)
        # "updated" (a block's priority or cache level) changes nothing a prompt can reuse.

    def _track_id(self, rank: int, event_id: Any) -> None:
        if not isinstance(event_id, int):
            return
        last = self._last_ids.get(rank)
        self._last_ids[rank] = event_id
        if last is not None and event_id != last + 1:
            self.lost_event_gaps += 1
            logger.warning(
                "TensorRT-LLM KV cache events %d..%d of attention-DP rank %d were lost (event buffer full, or "
                "read elsewhere): its blocks are dropped from the prefix index until it stores them again",
                last + 1,
                event_id - 1,
                rank,
            )
            self._forget_rank(rank)

    def _keep_window(self, event: dict[str, Any]) -> bool:
        """Whether ``event`` belongs to the largest attention window seen; a larger one voids the smaller's blocks."""
        window = event.get("window_size")
        if not isinstance(window, int):
            return True
        if self._window is None or window > self._window:
            if self._window is not None:
                for rank in {rank for rank, _ in self._blocks}:
                    self._forget_rank(rank)
            self._window = window
        return window == self._window

    def _stored(self, rank: int, data: dict[str, Any]) -> None:
        parent_trt = data.get("parent_hash")
        if parent_trt is None:
            parent = ROOT_HASH
        else:
            known = self._blocks.get((rank, parent_trt))
            if known is None:
                self.skipped_orphans += 1
                return
            parent = known
        blocks = data.get("blocks") or []
        for i, block in enumerate(blocks):
            tokens = block.get("tokens") or []
            if len(tokens) != self.block_tokens:
                if len(tokens) > self.block_tokens or i < len(blocks) - 1:
                    self._warn_block_size(len(tokens))
                return
            ids = [token.get("token_id") for token in tokens]
            trt_hash = block.get("block_hash")
            if trt_hash is None or any(token.get("token_extra_id") for token in tokens):
                return
            if not all(isinstance(token_id, int) for token_id in ids):
                return
            ours = chain_hash(parent, ids)
            key = (rank, trt_hash)
            old = self._blocks.get(key)
            if old != ours:
                self._blocks[key] = ours
                self._ref(ours)
                if old is not None:
                    self._unref(old)
            parent = ours

    def _warn_block_size(self, tokens: int) -> None:
        # Only a sequence's last block may be short: a longer one, or a short one inside the chain, means the
        # engine's blocks are not block_tokens long, and nothing it stores would ever be matched.
        if not self._warned_size:
            self._warned_size = True
            logger.warning(
                "TensorRT-LLM stored a KV cache block of %d tokens, but the adapter expects %d tokens per block: "
                "set the engine's tokens_per_block to what TensorRT-LLM uses, or its blocks never match a prompt",
                tokens,
                self.block_tokens,
            )

    def _forget_rank(self, rank: int) -> None:
        for key in [key for key in self._blocks if key[0] == rank]:
            self._unref(self._blocks.pop(key))

    def _ref(self, block: int) -> None:
        count = self._refs.get(block, 0)
        self._refs[block] = count + 1
        if count == 0:
            self._pending.store(block)

    def _unref(self, block: int) -> None:
        count = self._refs[block] - 1
        if count:
            self._refs[block] = count
        else:
            del self._refs[block]
            self._pending.remove(block)
