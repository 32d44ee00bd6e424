"""The prefix cache's bookkeeping: matches, references, LRU eviction of leaves first, and the events it reports."""

from __future__ import annotations

import pytest

from engines.kv_blocks import KvEvents, block_hashes, reusable_tokens
from engines.prefix_cache import PrefixCache


def test_chained_hashes_agree_exactly_on_a_shared_prefix():
    a = block_hashes(list(range(100)), 32)
    b = block_hashes([*range(64), *range(500, 540)], 32)
    assert len(a) == 3 and len(b) == 3  # whole blocks only
    assert a[:2] == b[:2] and a[2] != b[2]
    # A block's hash depends on everything before it, not only its own tokens.
    assert block_hashes([*range(1, 33), *range(32, 64)], 32)[1] != a[1]


def test_the_last_prompt_token_is_never_reused():
    assert reusable_tokens(2, 32, 64) == 63
    assert reusable_tokens(2, 32, 100) == 64
    assert reusable_tokens(0, 32, 100) == 0


def test_acquire_store_release_and_the_events_they_make():
    cache = PrefixCache(32)
    assert cache.drain_events().cleared  # readers start from empty
    held, reused = cache.acquire([1, 2, 3], 100)
    assert (held, reused) == (0, 0)
    assert cache.store([1, 2, 3], held) == 3
    events = cache.drain_events()
    assert events.stored == {1, 2, 3} and not events.removed
    held, reused = cache.acquire([1, 2, 9], 100)
    assert (held, reused) == (2, 64)
    assert cache.hit_tokens == 64 and cache.prompt_tokens == 200
    cache.release([1, 2, 3], 3)
    cache.release([1, 2, 9], 2)
    assert cache.unreferenced_tokens == 96


def test_referenced_blocks_are_never_evicted_and_leaves_go_before_roots():
    cache = PrefixCache(32)
    cache.store([1, 2, 3], 0)  # held by a running sequence
    cache.store([7, 8], 0)
    cache.release([7, 8], 2)
    cache.fit(0)
    assert 7 not in cache and 8 not in cache
    assert cache.matched_blocks([1, 2, 3]) == 3
    cache.release([1, 2, 3], 3)
    cache.fit(32)  # room for one unreferenced block: the root stays
    assert cache.matched_blocks([1, 2, 3]) == 1
    assert cache.drain_events().removed == {2, 3, 7, 8}


def test_events_fold_into_their_net_effect():
    events = KvEvents()
    events.store(1)
    events.remove(1)
    events.remove(2)
    events.store(2)
    assert events.stored == {2} and events.removed == {1}
    blocks = {1, 5}
    events.apply_to(blocks)
    assert blocks == {2, 5}
    later = KvEvents(cleared=True, stored={9})
    events.extend(later)
    assert events.cleared and events.stored == {9} and not events.removed


def test_block_size_must_be_positive():
    with pytest.raises(ValueError):
        PrefixCache(0)
