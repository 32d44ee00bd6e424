"""OpenAI response bodies and SSE framing.

The shapes follow ``openai.types.Completion`` / ``openai.types.chat.ChatCompletion(Chunk)`` exactly (the tests
parse our output with those types). Bodies are plain dicts + one shared JSON encoder: a hand-built byte template
for the streamed chunks measured under 1% of the ingress's per-chunk CPU, not worth a second copy of the shape.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from engines.protocol import TokenLogprob

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
    logprobs: bool = False  # the request asked for them: every choice carries a logprobs object
    _sent_role: set[int] = field(default_factory=set)  # the choices whose first chunk carried the role
    _text_offset: dict[int, int] = field(default_factory=dict)  # per choice: text_offset of its next token

    @property
    def chunk_object(self) -> str:
        return "chat.completion.chunk" if self.chat else "text_completion"

    def _base(self, obj: str) -> dict:
        body = {"id": self.id, "object": obj, "created": self.created, "model": self.model}
        if self.system_fingerprint:
            body["system_fingerprint"] = self.system_fingerprint
        return body

    def _logprobs(self, entries: Sequence[TokenLogprob] | None, index: int = 0) -> dict | None:
        """OpenAI's logprobs object for ``entries`` (chat: ``content``; completions: parallel lists), or None
        when the request asked for none."""
        if not self.logprobs:
            return None
        entries = entries or ()
        if self.chat:
            return {"content": [_chat_token(e) for e in entries], "refusal": None}
        offsets = []
        offset = self._text_offset.get(index, 0)
        for e in entries:
            offsets.append(offset)
            offset += len(e.token)
        self._text_offset[index] = offset
        return {
            "tokens": [e.token for e in entries],
            "token_logprobs": [e.logprob for e in entries],
            "top_logprobs": [dict(e.top) for e in entries],
            "text_offset": offsets,
        }

    def chunk(
        self,
        text: str,
        finish_reason: str | None,
        logprobs: Sequence[TokenLogprob] | None = None,
        index: int = 0,
    ) -> dict:
        body = self._base(self.chunk_object)
        lp = self._logprobs(logprobs, index)
        if self.chat:
            delta: dict = {"content": text}
            if index not in self._sent_role:
                delta["role"] = "assistant"
                self._sent_role.add(index)
            choice = {"index": index, "delta": delta, "finish_reason": finish_reason, "logprobs": lp}
        else:
            choice = {"index": index, "text": text, "finish_reason": finish_reason, "logprobs": lp}
        body["choices"] = [choice]
        return body

    def sse_chunk(
        self,
        text: str,
        finish_reason: str | None,
        logprobs: Sequence[TokenLogprob] | None = None,
        index: int = 0,
    ) -> bytes:
        """One streamed text chunk of choice ``index``, framed for SSE."""
        return sse(self.chunk(text, finish_reason, logprobs, index))

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> dict:
        body = self._base(self.chunk_object)
        body["choices"] = []
        body["usage"] = usage(prompt_tokens, completion_tokens)
        return body

    def full(
        self,
        text: str,
        finish_reason: str | None,
        prompt_tokens: int,
        completion_tokens: int,
        logprobs: Sequence[TokenLogprob] | None = None,
    ) -> dict:
        return self.full_choices([(text, finish_reason, logprobs)], prompt_tokens, completion_tokens)

    def full_choices(
        self,
        choices: Sequence[tuple[str, str | None, Sequence[TokenLogprob] | None]],
        prompt_tokens: int,
        completion_tokens: int,
    ) -> dict:
        """The whole response, one choice per (text, finish_reason, logprobs) indexed in order; usage is the
        request's: the prompt once, every choice's completion tokens."""
        body = self._base("chat.completion" if self.chat else "text_completion")
        out = []
        for index, (text, finish_reason, logprobs) in enumerate(choices):
            lp = self._logprobs(logprobs, index)
            if self.chat:
                message = {"role": "assistant", "content": text}
                out.append({"index": index, "message": message, "finish_reason": finish_reason, "logprobs": lp})
            else:
                out.append({"index": index, "text": text, "finish_reason": finish_reason, "logprobs": lp})
        body["choices"] = out
        body["usage"] = usage(prompt_tokens, completion_tokens)
        return body


def _token_bytes(token: str) -> list[int]:
    return list(token.encode("utf-8", errors="replace"))  # a token may be part of a character: its own bytes


def _chat_token(entry: TokenLogprob) -> dict:
    return {
        "token": entry.token,
        "logprob": entry.logprob,
        "bytes": _token_bytes(entry.token),
        "top_logprobs": [{"token": t, "logprob": lp, "bytes": _token_bytes(t)} for t, lp in entry.top],
    }


_OPENAI_FINISH = {"abort": "stop"}


def openai_finish_reason(reason: str | None) -> str | None:
    """Our finish reasons onto OpenAI's: an aborted stream reports 'stop' like OpenAI's own cancellations."""
    return _OPENAI_FINISH.get(reason, reason) if reason else reason
