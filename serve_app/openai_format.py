"""OpenAI response bodies and SSE framing, built as plain dicts on the per-chunk path.

The shapes follow ``openai.types.Completion`` / ``openai.types.chat.ChatCompletion(Chunk)`` exactly (the tests
parse our output with those types); plain dicts + ``json.dumps`` keep the per-chunk cost low.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

DONE = b"data: [DONE]\n\n"


def sse(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


@dataclass(slots=True)
class ResponseShape:
    """What every chunk of one response shares; ``chat`` picks the chat or the text completion shape."""

    id: str
    model: str
    created: int
    chat: bool
    system_fingerprint: str | None = None
    _sent_role: bool = field(default=False)

    @property
    def chunk_object(self) -> str:
        return "chat.completion.chunk" if self.chat else "text_completion"

    def _base(self, obj: str) -> dict:
        body = {"id": self.id, "object": obj, "created": self.created, "model": self.model}
        if self.system_fingerprint:
            body["system_fingerprint"] = self.system_fingerprint
        return body

    def chunk(self, text: str, finish_reason: str | None) -> dict:
        body = self._base(self.chunk_object)
        if self.chat:
            delta: dict = {"content": text}
            if not self._sent_role:
                delta["role"] = "assistant"
                self._sent_role = True
            body["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]
        else:
            body["choices"] = [{"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": None}]
        return body

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> dict:
        body = self._base(self.chunk_object)
        body["choices"] = []
        body["usage"] = usage(prompt_tokens, completion_tokens)
        return body

    def full(self, text: str, finish_reason: str | None, prompt_tokens: int, completion_tokens: int) -> dict:
        if self.chat:
            body = self._base("chat.completion")
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason,
                "logprobs": None,
            }
        else:
            body = self._base("text_completion")
            choice = {"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": None}
        body["choices"] = [choice]
        body["usage"] = usage(prompt_tokens, completion_tokens)
        return body


def openai_finish_reason(reason: str | None) -> str | None:
    """Our finish reasons onto OpenAI's: an aborted stream reports 'stop' like OpenAI's own cancellations."""
    return {"abort": "stop"}.get(reason or "", reason)
