"""Where the emulated engine's tokens come from: a deterministic walk through a real text, in real token ids.

The shipped corpus (the one the builtin models learn from: English and Chinese paragraphs) is tokenized once
with the variant's tokenizer. A request starts at a position drawn from its seed (or, for a greedy request,
from its prompt, so the same prompt gives the same answer) and reads on from there; a paragraph's end is where
the "model" says EOS, unless the request ignores EOS, and the walk wraps around at the end of the text. So
outputs are readable text whose bytes exercise every part of the streaming path (multi-byte characters split
across tokens included), and their natural lengths are the paragraphs'.
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Sequence
from typing import Any

from engines.builtin import corpus_text


class TokenSource:
    """The corpus as one list of ids, and the positions after which a paragraph ends."""

    def __init__(self, tokenizer: Any, text: str | None = None) -> None:
        ids: list[int] = []
        ends: set[int] = set()
        for paragraph in re.split(r"\n\s*\n", text if text is not None else corpus_text()):
            if paragraph.strip():
                ids.extend(tokenizer.encode(paragraph.strip() + "\n", add_special_tokens=False))
                ends.add(len(ids))  # EOS comes after the paragraph's last token
        if not ids:
            raise ValueError("the token source's text is empty")
        self.ids = ids
        self.paragraph_ends = frozenset(ends)
        # Byte-level tokens may hold part of a character: an answer starts only where one begins, as a real
        # model's would (it never starts inside a character it did not write).
        self.starts = [p for p in range(len(ids)) if not tokenizer.decode(ids[p : p + 4]).startswith("\ufffd")]

    def __len__(self) -> int:
        return len(self.ids)

    def start(self, prompt_token_ids: Sequence[int], seed: int | None, greedy: bool, fallback: random.Random) -> int:
        """Where a request's output begins: from its prompt when greedy, its seed when it has one, else drawn."""
        starts = self.starts
        if greedy:
            return starts[zlib.crc32(repr(list(prompt_token_ids)).encode()) % len(starts)]
        if seed is not None:
            return starts[random.Random(seed).randrange(len(starts))]
        return starts[fallback.randrange(len(starts))]
