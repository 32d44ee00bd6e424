"""OpenAI response bodies and SSE framing.

The shapes follow ``openai.types.Completion`` / ``openai.types.chat.ChatCompletion(Chunk)`` exactly (the tests
parse our output with those types). Bodies are plain dicts + one shared JSON encoder: a hand-built byte template
for the streamed chunks measured under 1% of the ingress's per-chunk CPU, not worth a second copy of the shape.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

DONE = b"data: [DONE]\n\n"

# One encoder for every body: json.dumps with arguments builds a new JSONEncoder on each call.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_encode = _ENCODER.encode


def sse(payload: dict) -> bytes:
    return b"data: " + _encode(payload).encode() + b"\n\n"


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

    def sse_chunk(self, text: str, finish_reason: str | None) -> bytes:
        """One streamed text chunk, framed for SSE."""
        return sse(self.chunk(text, finish_reason))

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


_OPENAI_FINISH = {"abort": "stop"}


def openai_finish_reason(reason: str | None) -> str | None:
    """Our finish reasons onto OpenAI's: an aborted stream reports 'stop' like OpenAI's own cancellations."""
    return _OPENAI_FINISH.get(reason, reason) if reason else reason
