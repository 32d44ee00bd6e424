"""Incremental detokenization: token ids in, only the newly readable text out, never half a character.

Decoding a single token on its own is wrong in two ways: a byte-level token may hold part of a UTF-8
character (Chinese text, emoji), and many tokenizers render a token differently depending on what
precedes it (SentencePiece's leading-space marker). Decoding the whole sequence on every token is right
but costs O(length) per token on the hot path. vLLM's technique does neither: it decodes a small window
twice, ``ids[prefix:read]`` (text already emitted, as context) and ``ids[prefix:]``, and emits the
difference once it does not end in U+FFFD (the replacement character of an incomplete byte sequence).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_REPLACEMENT = "\ufffd"
# Tokens decoded as context before the first new one (vLLM uses the same number for the prompt).
_CONTEXT_TOKENS = 5
# How far back from the end to look for a token boundary that is also a character boundary. A UTF-8
# character has at most 4 bytes, so in valid text one is always a few tokens back; when none is found
# within this many tokens, the trailing U+FFFD is genuine (the model produced invalid bytes) and is
# emitted rather than held, so that neither the latency nor the cost of a call grows without bound.
_MAX_HELD_TOKENS = 8


class IncrementalDetokenizer:
    """Turns a stream of generated token ids into a stream of text pieces.

    Joining every ``add`` result and the final ``flush`` gives ``tokenizer.decode(all_ids)`` for valid text.
    ``add`` accepts any number of ids (engines coalesce tokens into chunks); it holds back only the last
    few tokens of an incomplete character. ``prompt_token_ids`` (optional) gives the first generated
    tokens their context, so that, for example, the leading space of a SentencePiece token is kept.
    """

    def __init__(
        self, tokenizer: Any, *, skip_special_tokens: bool = True, prompt_token_ids: Sequence[int] = ()
    ) -> None:
        self._tokenizer = tokenizer
        self._skip_special_tokens = skip_special_tokens
        # The window: context tokens (already emitted) up to ``_read``, then held tokens. Ids before the
        # window are dropped, since they are never decoded again.
        self._ids: list[int] = list(prompt_token_ids[-_CONTEXT_TOKENS:])
        self._read = len(self._ids)

    def add(self, token_ids: Sequence[int]) -> str:
        """Appends new token ids; returns the text they complete (possibly empty)."""
        if not token_ids:
            return ""
        self._ids.extend(token_ids)
        context = self._decode(self._ids[: self._read])
        text = self._decode(self._ids)
        held = len(self._ids) - self._read
        if not text.endswith(_REPLACEMENT):
            if len(text) > len(context) or held > _MAX_HELD_TOKENS:
                return self._emit(context, text, len(self._ids))
            return ""  # nothing visible yet (a skipped special token): keep the context as it is
        # The text ends inside a character: emit up to the last token boundary that is a character boundary.
        for end in range(len(self._ids) - 1, max(self._read, len(self._ids) - _MAX_HELD_TOKENS), -1):
            head = self._decode(self._ids[:end])
            if len(head) > len(context) and not head.endswith(_REPLACEMENT):
                return self._emit(context, head, end)
        return self._emit(context, text, len(self._ids)) if held > _MAX_HELD_TOKENS else ""

    def flush(self) -> str:
        """Returns whatever is still held back; call once when the stream ends."""
        if self._read == len(self._ids):
            return ""
        return self._emit(self._decode(self._ids[: self._read]), self._decode(self._ids), len(self._ids))

    def _emit(self, context: str, text: str, end: int) -> str:
        # The tokens emitted now become the context of the next window; everything before them is dropped.
        del self._ids[: self._read]
        self._read = end - self._read
        return text[len(context) :]

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=self._skip_special_tokens)
