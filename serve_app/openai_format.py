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
from serve_app.tool_calls import ToolCall, may_be_a_call, parse_calls

DONE = b"data: [DONE]\n\n"

# One encoder for every body: json.dumps with arguments builds a new JSONEncoder on each call.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_encode = _ENCODER.encode


def sse(payload: dict) -> bytes:
    return b"data: " + _encode(payload).encode() + b"\n\n"


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None) -> dict:
    """OpenAI's usage; ``prompt_tokens_details.cached_tokens`` where the engine said how much of the prompt its
    prefix cache supplied."""
    body: dict = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if cached_tokens is not None:
        body["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return body


@dataclass(slots=True)
class ResponseShape:
    """What every chunk of one response shares; ``chat`` picks the chat or the text completion shape."""

    id: str
    model: str
    created: int
    chat: bool
    system_fingerprint: str | None = None
    logprobs: bool = False  # the request asked for them: every choice carries a logprobs object
    # Chat with tools the model was shown: the output is read back for calls of these (serve_app/tool_calls.py).
    tool_names: frozenset[str] | None = None
    _sent_role: set[int] = field(default_factory=set)  # the choices whose first chunk carried the role
    _text_offset: dict[int, int] = field(default_factory=dict)  # per choice: text_offset of its next token
    _held: dict[int, _Held] = field(default_factory=dict)  # per choice: output that may be tool calls, not yet sent

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
        """One streamed text chunk of choice ``index``, framed for SSE; with tools, what of it may be sent yet
        (b"" while a possible call is held back, its calls once the choice finishes)."""
        if self.tool_names is None or not self.chat:
            return sse(self.chunk(text, finish_reason, logprobs, index))
        held = self._held.setdefault(index, _Held())
        if held.passing:
            return sse(self.chunk(text, finish_reason, logprobs, index))
        held.text += text
        held.logprobs.extend(logprobs or ())
        verdict = may_be_a_call(held.text)
        if verdict is False:  # plain content: what was held, then everything as it comes
            held.passing = True
            return sse(self.chunk(held.text, finish_reason, held.logprobs, index))
        if finish_reason is None:
            return b""
        calls = parse_calls(held.text, self.tool_names) if verdict else None
        if calls is None:
            return sse(self.chunk(held.text, finish_reason, held.logprobs, index))
        return sse(self.tool_calls_chunk(calls, held.logprobs, index))

    def tool_calls_chunk(self, calls: Sequence[ToolCall], logprobs: Sequence[TokenLogprob], index: int = 0) -> dict:
        """A choice's calls as one streamed chunk, which finishes it (the openai SDK accumulates the deltas)."""
        body = self._base(self.chunk_object)
        delta: dict = {"content": None, "tool_calls": [c.as_openai(i) for i, c in enumerate(calls)]}
        if index not in self._sent_role:
            delta["role"] = "assistant"
            self._sent_role.add(index)
        lp = self._logprobs(logprobs, index)
        body["choices"] = [{"index": index, "delta": delta, "finish_reason": "tool_calls", "logprobs": lp}]
        return body

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None) -> dict:
        body = self._base(self.chunk_object)
        body["choices"] = []
        body["usage"] = usage(prompt_tokens, completion_tokens, cached_tokens)
        return body

    def full(
        self,
        text: str,
        finish_reason: str | None,
        prompt_tokens: int,
        completion_tokens: int,
        logprobs: Sequence[TokenLogprob] | None = None,
        cached_tokens: int | None = None,
    ) -> dict:
        return self.full_choices([(text, finish_reason, logprobs)], prompt_tokens, completion_tokens, cached_tokens)

    def full_choices(
        self,
        choices: Sequence[tuple[str, str | None, Sequence[TokenLogprob] | None]],
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int | None = None,
    ) -> dict:
        """The whole response, one choice per (text, finish_reason, logprobs) indexed in order; usage is the
        request's: the prompt once, every choice's completion tokens."""
        body = self._base("chat.completion" if self.chat else "text_completion")
        out = []
        for index, (text, finish_reason, logprobs) in enumerate(choices):
            lp = self._logprobs(logprobs, index)
            if self.chat:
                message: dict = {"role": "assistant", "content": text}
                # The rule the stream follows (sse_chunk), so that both give the same answer.
                calls = parse_calls(text, self.tool_names) if self.tool_names is not None else None
                if calls is not None and finish_reason is not None:
                    message = {"role": "assistant", "content": None, "tool_calls": [c.as_openai() for c in calls]}
                    finish_reason = "tool_calls"
                out.append({"index": index, "message": message, "finish_reason": finish_reason, "logprobs": lp})
            else:
                out.append({"index": index, "text": text, "finish_reason": finish_reason, "logprobs": lp})
        body["choices"] = out
        body["usage"] = usage(prompt_tokens, completion_tokens, cached_tokens)
        return body


@dataclass(slots=True)
class _Held:
    """One choice's output while it may still be tool calls (ResponseShape.sse_chunk)."""

    text: str = ""
    logprobs: list[TokenLogprob] = field(default_factory=list)
    passing: bool = False  # decided: plain content, sent as it comes


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
