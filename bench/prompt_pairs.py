"""Prompts that are the same request whether sent as token ids or as text.

The overhead comparison sends token-id prompts of an exact length to the paths that take them, but
``transformers serve`` only takes text, which it tokenizes itself (special tokens included). For the paths
to see identical work, each prompt here is a text whose encoding is exactly ``length`` ids, and the id
paths send that very encoding.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from traffic.workload import RequestSpec, Slo, make_prompt

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


def output_lengths(count: int, max_tokens: int, *, staggered: int = 0, spread: float = 0.0, seed: int = 0) -> list[int]:
    """Each request's output length: ``max_tokens``, except that the first ``staggered`` requests (one per worker of
    a closed loop that many wide) ask for evenly spread shares of it, the i-th ``ceil(max_tokens * (i + 1) /
    staggered)``; with ``spread``, every later request asks for ``max_tokens`` times a seeded draw from ``1 -
    spread`` to ``1 + spread`` (the mean stays ``max_tokens``; the same lengths for the same seed, on every path).

    Why the staggered first round: a closed loop of identical requests that all start together runs in lockstep,
    every prefill in one iteration and then decode-only iterations, which no server sees: through HTTP the requests
    drift apart and prefills mix into decode iterations. For transformers' continuous batching on a CPU that mix
    alone halves the tokens/s (``docs/streaming.md``), so a lockstep engine-alone figure is a yardstick no serving
    layer can meet. Ending the first round at spread times puts every path in the steady state that a stack reaches
    by itself, without guessing the engine's speed (start delays would have to).

    Why the spread after it: with every later request the same length, a stream's phase never changes but by the
    path's jitter, and two streams whose next requests reach the engine within one iteration are prefilled
    together and end together from then on. A serving path's few ms of jitter merge streams faster than it splits
    them, so over a level they lock into clumps: on a 16-core host the stack's 64-stream TTFT p50 grew from 36 to
    79 ms within one level, and one run in two showed it (docs/streaming.md). The engine alone has no
    jitter and never clumps. Outputs of different lengths, as real clients' are, keep re-mixing the phases.
    """
    lengths = [max_tokens] * count
    rng = random.Random(f"{seed}:output-lengths")
    for i in range(count):
        if i < staggered:
            lengths[i] = max(1, math.ceil(max_tokens * (i + 1) / staggered))
        elif spread > 0.0:
            lengths[i] = max(1, round(max_tokens * (1.0 + spread * rng.uniform(-1.0, 1.0))))
    return lengths


def request_specs(
    pairs: Sequence[PromptPair], max_tokens: int, *, as_text: bool, staggered: int = 0, spread: float = 0.0
) -> list[RequestSpec]:
    """Closed-loop requests (no send times), one per pair, prompts as text or as token ids; with ``staggered``, the
    first round's outputs end at spread times; with ``spread``, the later ones vary in length
    (:func:`output_lengths`)."""
    lengths = output_lengths(len(pairs), max_tokens, staggered=staggered, spread=spread)
    return [
        RequestSpec(
            index=i,
            send_at=None,
            prompt=pair.text if as_text else list(pair.token_ids),
            prompt_tokens=len(pair.token_ids),
            max_tokens=length,
            slo=Slo(),
        )
        for i, (pair, length) in enumerate(zip(pairs, lengths, strict=True))
    ]
