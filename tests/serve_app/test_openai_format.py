"""serve_app.openai_format: the streamed chunks' fast encoding writes exactly what encoding the dict writes,
and what it writes parses as the openai package's own chunk types."""

from __future__ import annotations

import json

import pytest
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from engines.protocol import TokenLogprob
from serve_app.openai_format import DONE, ResponseShape, openai_finish_reason, sse

TEXTS = ["", "hi", ' "quoted" \\ back', "line\nbreak\ttab \x00\x1f", "héllo ✓ 😀 中文", "\u2028\u2029", "</script>"]


def _shapes(chat: bool) -> list[tuple[ResponseShape, ResponseShape]]:
    """Pairs of identical shapes, one for each encoding (a chat shape remembers sending the role)."""
    fields = [
        {"id": "cmpl-1", "model": "local-llama", "created": 1700000000},
        {"id": 'cmpl-"odd"', "model": "modèle ✓", "created": 0, "system_fingerprint": "fp_1"},
    ]
    return [(ResponseShape(chat=chat, **f), ResponseShape(chat=chat, **f)) for f in fields]


@pytest.mark.parametrize("chat", [False, True], ids=["completion", "chat"])
def test_sse_chunk_writes_the_bytes_of_the_encoded_dict(chat):
    for by_dict, fast in _shapes(chat):
        for text in TEXTS:
            for finish_reason in (None, "length", "stop"):
                assert fast.sse_chunk(text, finish_reason) == sse(by_dict.chunk(text, finish_reason))


def _payload(frame: bytes) -> dict:
    assert frame.startswith(b"data: ") and frame.endswith(b"\n\n")
    return json.loads(frame[len(b"data: ") : -2])


def test_chat_chunks_carry_the_role_once_and_parse_as_openai_chunks():
    shape = ResponseShape(id="chatcmpl-1", model="m", created=1, chat=True)
    first, second, last = (
        ChatCompletionChunk.model_validate(_payload(shape.sse_chunk(t, r)))
        for t, r in [("Hel", None), ("lo", None), ("", "stop")]
    )
    assert first.choices[0].delta.role == "assistant" and first.choices[0].delta.content == "Hel"
    assert second.choices[0].delta.role is None and second.choices[0].delta.content == "lo"
    assert last.choices[0].finish_reason == "stop"


def test_completion_chunks_parse_as_openai_completions():
    shape = ResponseShape(id="cmpl-1", model="m", created=1, chat=False)
    chunk = Completion.model_validate(_payload(shape.sse_chunk('say "hi"\n', "length")))
    assert chunk.choices[0].text == 'say "hi"\n' and chunk.choices[0].finish_reason == "length"
    assert DONE == b"data: [DONE]\n\n"


def test_abort_reads_as_stop_and_the_rest_pass_through():
    assert [openai_finish_reason(r) for r in ("abort", "stop", "length", None)] == ["stop", "stop", "length", None]


LOGPROBS = [
    TokenLogprob("Hel", -0.1, (("Hel", -0.1), ("He", -2.5))),
    TokenLogprob("lo \u00e9", -0.75, (("lo \u00e9", -0.75),)),
]


def test_completion_logprobs_parse_as_openais_types_with_offsets_across_chunks():
    shape = ResponseShape(id="cmpl-1", model="m", created=1, chat=False, logprobs=True)
    first = Completion.model_validate(shape.chunk("Hel", "length", LOGPROBS[:1]))  # the type wants a reason
    second = Completion.model_validate(shape.chunk("lo \u00e9", "stop", LOGPROBS[1:]))
    assert first.choices[0].logprobs.tokens == ["Hel"]  # type: ignore[union-attr]
    assert second.choices[0].logprobs.text_offset == [3]  # type: ignore[union-attr]
    assert second.choices[0].logprobs.top_logprobs == [{"lo \u00e9": -0.75}]  # type: ignore[union-attr]
    whole = ResponseShape(id="cmpl-1", model="m", created=1, chat=False, logprobs=True)
    full = Completion.model_validate(whole.full("Hello \u00e9", "stop", 2, 2, LOGPROBS))
    assert full.choices[0].logprobs.token_logprobs == [-0.1, -0.75]  # type: ignore[union-attr]
    assert full.choices[0].logprobs.text_offset == [0, 3]  # type: ignore[union-attr]


def test_chat_logprobs_parse_as_openais_types_with_bytes():
    shape = ResponseShape(id="chatcmpl-1", model="m", created=1, chat=True, logprobs=True)
    chunk = ChatCompletionChunk.model_validate(shape.chunk("Hello \u00e9", None, LOGPROBS))
    content = chunk.choices[0].logprobs.content  # type: ignore[union-attr]
    assert [c.token for c in content] == ["Hel", "lo \u00e9"]  # type: ignore[union-attr]
    assert content[1].bytes == list("lo \u00e9".encode())  # type: ignore[index]
    assert [t.token for t in content[0].top_logprobs] == ["Hel", "He"]  # type: ignore[index]
    whole = ResponseShape(id="chatcmpl-1", model="m", created=1, chat=True, logprobs=True)
    full = ChatCompletion.model_validate(whole.full("Hello \u00e9", "stop", 2, 2, LOGPROBS))
    assert full.choices[0].logprobs.content[0].logprob == -0.1  # type: ignore[union-attr,index]


def test_without_logprobs_asked_choices_carry_none():
    shape = ResponseShape(id="cmpl-1", model="m", created=1, chat=False)
    assert shape.chunk("x", None, LOGPROBS)["choices"][0]["logprobs"] is None


def test_several_choices_carry_their_index_and_each_its_own_role_and_offsets():
    shape = ResponseShape(id="chatcmpl-1", model="m", created=1, chat=True)
    chunks = [ChatCompletionChunk.model_validate(shape.chunk("x", None, None, i)) for i in (0, 1, 0, 1)]
    assert [c.choices[0].index for c in chunks] == [0, 1, 0, 1]
    assert [c.choices[0].delta.role for c in chunks] == ["assistant", "assistant", None, None]
    completions = ResponseShape(id="cmpl-1", model="m", created=1, chat=False, logprobs=True)
    completions.chunk("Hel", None, LOGPROBS[:1], 0)
    second = completions.chunk("Hel", None, LOGPROBS[:1], 1)
    assert second["choices"][0]["logprobs"]["text_offset"] == [0]  # offsets count per choice
    whole = ResponseShape(id="cmpl-1", model="m", created=1, chat=False)
    full = Completion.model_validate(whole.full_choices([("a", "stop", None), ("b", "length", None)], 3, 5))
    assert [(c.index, c.text, c.finish_reason) for c in full.choices] == [(0, "a", "stop"), (1, "b", "length")]
    assert full.usage is not None and (full.usage.prompt_tokens, full.usage.completion_tokens) == (3, 5)
