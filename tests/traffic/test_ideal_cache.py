"""The ideal prefix hit rate: blocks some earlier request had, matched along the prefix."""

from __future__ import annotations

from traffic.ideal_cache import ideal_prefix_hits
from traffic.segments import segment_block_hashes


def test_hits_are_leading_blocks_seen_before():
    hits = ideal_prefix_hits([[1, 2, 3], [1, 2, 4], [1, 2, 3, 5], [9], []])
    assert hits.per_request == (0, 2, 3, 0, 0)
    assert (hits.blocks, hits.hit_blocks) == (11, 5)
    assert hits.hit_rate == 5 / 11


def test_matching_stops_at_the_first_miss():
    # Block 3 of the second request was seen, but not its block 2: a cache cannot use it.
    assert ideal_prefix_hits([[1, 2, 3], [1, 7, 3]]).per_request == (0, 1)


def test_an_empty_workload_has_no_hits():
    assert ideal_prefix_hits([]).hit_rate == 0.0


def test_shared_system_prompt_is_the_cacheable_part():
    prompts = [((1, 1024), (100 + i, 1024)) for i in range(10)]
    hits = ideal_prefix_hits(segment_block_hashes(p, 64) for p in prompts)
    assert hits.hit_rate == (9 * 16) / (10 * 32)
