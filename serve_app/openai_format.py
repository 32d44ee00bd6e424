"""OpenAI response bodies and SSE framing.

The shapes follow ``openai.types.Completion`` / ``openai.types.chat.ChatCompletion(Chunk)`` exactly (the tests
parse our output with those types). Bodies are plain dicts + ``json.dumps``, except the streamed text chunks,
the per-token path: ``ResponseShape.sse_chunk`` writes the same bytes as ``sse(chunk(...))`` from a prefix
encoded once per response, with only the text (and a finish reason) encoded per chunk.
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


def _chunk_tail(finish_reason: str | None) -> bytes:
    """What follows a text chunk's text: the finish reason, then the closing brackets and the SSE frame end."""
    return b',"finish_reason":' + _encode(finish_reason).encode() + b',"logprobs":null}]}\n\n'


_TAIL_OPEN = _chunk_tail(None)  # every chunk but the last


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
    _prefix: bytes = field(default=b"", init=False, repr=False)  # sse_chunk's bytes up to the text

    def __post_init__(self) -> None:
        head = _encode(self._base(self.chunk_object))[:-1]  # the shared fields, without the closing brace
        opening = '"delta":{"content":' if self.chat else '"text":'
        self._prefix = f'data: {head},"choices":[{{"index":0,{opening}'.encode()

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
        """``sse(self.chunk(text, finish_reason))``, byte for byte, without building and encoding the dict."""
        tail = _TAIL_OPEN if finish_reason is None else _chunk_tail(finish_reason)
        if self.chat:
            role = b""
            if not self._sent_role:
                role = b',"role":"assistant"'
                self._sent_role = True
            return self._prefix + _encode(text).encode() + role + b"}" + tail
        return self._prefix + _encode(text).encode() + tail

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
