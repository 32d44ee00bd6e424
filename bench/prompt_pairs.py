"""Prompts that are the same request whether sent as token ids or as text.

The overhead comparison sends token-id prompts of an exact length to the paths that take them, but
``transformers serve`` only takes text, which it tokenizes itself (special tokens included). For the paths
to see identical work, each prompt here is a text whose encoding is exactly ``length`` ids, and the id
paths send that very encoding.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from bench.workload import RequestSpec, Slo, make_prompt

_MAX_TRIES = 1000


class Encoder(Protocol):
    def encode(self, text: str) -> list[int]: ...


@dataclass(frozen=True, slots=True)
class PromptPair:
    token_ids: list[int]  # the tokenizer's encoding of ``text``, special tokens included
    text: str


def prompt_pair(tokenizer: Encoder, length: int, rng: random.Random) -> PromptPair:
    """Random short words, added one at a time until the encoding has exactly ``length`` ids.

    A word that overshoots (one that encodes to several ids) is swapped for another, so the length is exact.
    """
    words: list[str] = []
    for _ in range(_MAX_TRIES):
        word = str(make_prompt(1, "text", (0, 1), rng))
        ids = list(tokenizer.encode(" ".join([*words, word])))
        if len(ids) == length:
            return PromptPair(ids, " ".join([*words, word]))
        if len(ids) < length:
            words.append(word)
    raise ValueError(f"could not build a prompt of exactly {length} tokens (is it below the special tokens?)")


def prompt_pairs(tokenizer: Encoder, count: int, length: int, seed: int = 0) -> list[PromptPair]:
    """``count`` different prompts of ``length`` tokens each, the same for the same seed."""
    rng = random.Random(f"{seed}:prompt-pairs")
    return [prompt_pair(tokenizer, length, rng) for _ in range(count)]


def request_specs(pairs: Sequence[PromptPair], max_tokens: int, *, as_text: bool) -> list[RequestSpec]:
    """Closed-loop requests (no send times), one per pair, prompts as text or as token ids."""
    return [
        RequestSpec(
            index=i,
            send_at=None,
            prompt=pair.text if as_text else list(pair.token_ids),
            prompt_tokens=len(pair.token_ids),
            max_tokens=max_tokens,
            slo=Slo(),
        )
        for i, pair in enumerate(pairs)
    ]
