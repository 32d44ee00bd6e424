"""A prompt's content as segments: a tuple of ``(segment_id, tokens)``.

Token ``j`` of segment ``s`` is a function of ``(s, j)`` alone, so two prompts share a prefix exactly where their
segment sequences agree (a shortened segment is a prefix of the longer one). The bench turns segments into real
token ids (:func:`segment_token_ids`); the simulator never does, and names the KV cache blocks of a prompt straight
from its segments (:func:`segment_block_hashes`), as cheaply as the number of blocks, not of tokens.

Segment hashes are not the engines' token hashes (``engines/kv_blocks.py``): each world is consistent with itself,
equal prefixes giving equal hashes in both, but a hash from one never names a block of the other.
"""

from __future__ import annotations

import hashlib
import random
import threading
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from functools import lru_cache
from typing import TypeAlias

Segment: TypeAlias = tuple[int, int]  # (segment_id, tokens)
Segments: TypeAlias = tuple[Segment, ...]

ROOT_HASH = 0  # the parent of a prompt's first block, as in engines/kv_blocks.py

# Cached token ids of recently used segments, bounded by their total length (4 bytes a token, in arrays: a list
# would hold an int object a token, 9 times the memory): shared prefixes are drawn once, unique questions pass
# through without growing the process.
CACHE_TOKENS = 8_000_000


def segment_id(namespace: str, *parts: int | str) -> int:
    """A 63-bit segment id for ``parts`` within ``namespace`` (``"shared_prefix"``, ``"mooncake"``...).

    Hashed (not offset) so that workloads and traces never collide however many ids each uses; blake2b and not
    ``hash`` because ``str`` hashes change from one process to the next, and the bench and the simulator must agree.
    """
    text = repr((namespace, *parts)).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big") >> 1


def total_tokens(segments: Sequence[Segment]) -> int:
    return sum(tokens for _, tokens in segments)


class _TokenCache:
    """Token ids of segments, least recently used dropped first once the total passes ``limit`` tokens."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self._ids: OrderedDict[tuple[int, int, int], array[int]] = OrderedDict()
        self._lock = threading.Lock()  # a bench may build requests from more than one thread

    def get(self, seg: int, n: int, low: int, high: int) -> array[int]:
        key = (seg, low, high)
        with self._lock:
            ids = self._ids.get(key)
            if ids is not None and len(ids) >= n:
                self._ids.move_to_end(key)
                return ids
        # choices() draws one random() per element in order, so the first n of a longer draw are the draw of n:
        # a segment asked for longer later is redrawn, and its earlier tokens are unchanged.
        ids = array("I", random.Random(f"segment:{seg}").choices(range(low, high), k=n))
        with self._lock:
            old = self._ids.pop(key, None)
            self.size += n - (len(old) if old is not None else 0)
            self._ids[key] = ids
            while self.size > self.limit and len(self._ids) > 1:
                _, dropped = self._ids.popitem(last=False)
                self.size -= len(dropped)
        return ids

    def clear(self) -> None:
        with self._lock:
            self._ids.clear()
            self.size = 0


_tokens = _TokenCache(CACHE_TOKENS)


def segment_token_ids(segments: Sequence[Segment], token_id_range: tuple[int, int]) -> list[int]:
    """The prompt's token ids: token ``j`` of segment ``s`` drawn from ``[low, high)`` by a stream seeded by ``s``."""
    low, high = token_id_range
    out: list[int] = []
    for seg, n in segments:
        if n > 0:
            ids = _tokens.get(seg, n, low, high)
            out.extend(ids if len(ids) == n else ids[:n])
    return out


def segment_block_hashes(segments: Sequence[Segment], block_tokens: int, parent: int = ROOT_HASH) -> list[int]:
    """Chained hashes of the prompt's whole ``block_tokens`` blocks, without its tokens (a partial tail has none).

    Block ``k`` is described by the ``(segment_id, start, end)`` pieces it covers and hashed with its parent's hash,
    so equal segment prefixes give equal hashes and a different segment anywhere before gives different ones.
    """
    if block_tokens < 1:
        raise ValueError("block_tokens must be >= 1")
    # A tuple of int pairs whatever came in (lists from JSON too): the cache's key.
    key = tuple((int(seg), int(n)) for seg, n in segments)
    return list(_block_hashes(key, block_tokens, parent))


# The router and the replicas of a simulation may each hash the same prompt: the second time is a lookup.
@lru_cache(maxsize=256)
def _block_hashes(segments: Segments, block_tokens: int, parent: int) -> tuple[int, ...]:
    out: list[int] = []
    h = parent
    pieces: list[tuple[int, int, int]] = []  # the pieces of the block being filled
    need = block_tokens  # tokens it still lacks
    for seg, n in segments:
        start = 0
        if pieces and n > 0:  # finish the block that an earlier segment began
            take = min(need, n)
            pieces.append((seg, 0, take))
            need -= take
            start = take
            if need == 0:
                h = hash((h, tuple(pieces)))
                out.append(h)
                pieces, need = [], block_tokens
        # Whole blocks inside this segment: one piece each, no per-token work.
        while n - start >= block_tokens:
            h = hash((h, ((seg, start, start + block_tokens),)))
            out.append(h)
            start += block_tokens
        if start < n:  # a remainder that the next segment (if any) completes
            pieces.append((seg, start, n))
            need -= n - start
    return tuple(out)
