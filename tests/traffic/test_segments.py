"""Segments name a prompt's content: equal segment prefixes are equal tokens and equal block hashes."""

from __future__ import annotations

import random
import time

import pytest

from engines.kv_blocks import block_hashes
from traffic.segments import segment_block_hashes, segment_id, segment_token_ids

RANGE = (0, 50_000)  # wide, so that two different segments' blocks never draw the same tokens by chance


def test_token_j_of_a_segment_depends_only_on_the_segment_and_j():
    short = segment_token_ids(((7, 10),), RANGE)
    long = segment_token_ids(((7, 300),), RANGE)
    assert long[:10] == short
    assert segment_token_ids(((3, 5), (7, 20)), RANGE)[5:] == long[:20]
    assert segment_token_ids(((8, 300),), RANGE) != long
    assert segment_token_ids(((7, 0), (9, 0)), RANGE) == []


def test_token_ids_stay_in_range():
    ids = segment_token_ids(((1, 2000), (2, 2000)), (256, 260))
    assert len(ids) == 4000 and set(ids) == {256, 257, 258, 259}


def test_segment_ids_are_stable_and_namespaced():
    assert segment_id("a", 1, 2) == segment_id("a", 1, 2)
    assert len({segment_id("a", 1, 2), segment_id("b", 1, 2), segment_id("a", 2, 1), segment_id("a", 1)}) == 4
    assert 0 <= segment_id("a", 1) < 2**63


@pytest.mark.parametrize("block_tokens", [1, 4, 16, 64, 512])
def test_block_hashes_share_exactly_where_token_blocks_do(block_tokens):
    # Prompts from a small pool of segments, so they share prefixes of many lengths (and segments in other places).
    rng = random.Random(block_tokens)
    pool = [(seg, rng.choice([3, 16, 50, 64, 200])) for seg in range(6)]
    prompts = []
    for _ in range(40):
        prompt = tuple(rng.choice(pool) for _ in range(rng.randint(1, 5)))
        if rng.random() < 0.5:  # a shortened last segment, as a trace's partial last block is
            seg, n = prompt[-1]
            prompt = (*prompt[:-1], (seg, rng.randint(1, n)))
        prompts.append(prompt)
    ours = [segment_block_hashes(p, block_tokens) for p in prompts]
    theirs = [block_hashes(segment_token_ids(p, RANGE), block_tokens) for p in prompts]

    for p, a, b in zip(prompts, ours, theirs, strict=True):
        assert len(a) == len(b) == sum(n for _, n in p) // block_tokens
    for a1, b1 in zip(ours, theirs, strict=True):
        for a2, b2 in zip(ours, theirs, strict=True):
            for k in range(min(len(a1), len(a2))):
                assert (a1[k] == a2[k]) == (b1[k] == b2[k])


def test_equal_prefixes_equal_hashes_and_a_different_segment_changes_every_later_block():
    a = segment_block_hashes(((1, 100), (2, 100), (3, 100)), 32)
    b = segment_block_hashes(((1, 100), (2, 100), (4, 100)), 32)
    c = segment_block_hashes(((5, 100), (2, 100), (3, 100)), 32)
    assert len(a) == 300 // 32
    assert a[:6] == b[:6]  # blocks 0-5 end at token 192 <= 200: only segments 1 and 2
    assert not set(a[6:]) & set(b[6:])  # block 6 takes tokens 192-224, segment 3 or 4 from 200 on
    assert not set(a) & set(c)
    assert segment_block_hashes(((1, 31),), 32) == []


def test_zero_length_segments_change_nothing():
    assert segment_block_hashes(((1, 40), (9, 0), (2, 40)), 16) == segment_block_hashes(((1, 40), (2, 40)), 16)


def test_block_hashes_chain_from_a_parent():
    whole = segment_block_hashes(((1, 64), (2, 64)), 32)
    assert segment_block_hashes(((2, 64),), 32, parent=whole[1]) == whole[2:]


def test_hashing_long_prompts_takes_no_per_token_work():
    prompts = [((1, 4096), (1000 + i, 11_000)) for i in range(200)]  # 200 prompts of 15k tokens
    start = time.perf_counter()
    for p in prompts:
        segment_block_hashes(p, 16)
    # ~940 blocks each: well under a second even on a slow machine; per-token work would take several.
    assert time.perf_counter() - start < 1.5
