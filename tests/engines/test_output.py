"""engines.output: one request's outputs to deltas, from ids (hf, emulated) or from text (trtllm, openai_server)."""

from __future__ import annotations

from engines.output import OutputStream, stop_token_ids
from engines.protocol import GenerationRequest, SamplingParams
from engines.rate import TokenRate


class _CharTokenizer:
    """One token per character: id = code point; id 0 is a special token (skipped)."""

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(i) for i in ids if i or not skip_special_tokens)


def _request(stop: list[str] | None = None, **sampling: object) -> GenerationRequest:
    return GenerationRequest("r1", [1, 2, 3], SamplingParams(max_tokens=16, stop=stop or [], **sampling))  # type: ignore[arg-type]


def _ids(text: str) -> list[int]:
    return [ord(c) for c in text]


def test_from_ids_ends_at_a_stop_id_without_its_text_and_counts_the_rate():
    rate = TokenRate()
    stream = OutputStream(_request(), rate, tokenizer=_CharTokenizer(), stop_ids={0})
    first = stream.from_ids(_ids("ab"), completion_tokens=2, engine_finished=False, length_reached=False)
    last = stream.from_ids([*_ids("c"), 0], completion_tokens=4, engine_finished=True, length_reached=False)
    assert (first.text, first.finish_reason, first.prompt_tokens) == ("ab", None, 3)
    assert (last.text, last.finish_reason, last.token_ids) == ("c", "stop", [ord("c"), 0])
    assert first.first_token_time is not None and last.first_token_time == first.first_token_time
    assert rate.rate(rate._events[-1][0]) > 0  # both steps' tokens told to the engine's rate


def test_from_ids_is_length_at_max_tokens_and_stop_at_the_engines_own_end():
    for length_reached, reason in ((True, "length"), (False, "stop")):
        stream = OutputStream(_request(), None, tokenizer=_CharTokenizer())
        delta = stream.from_ids(_ids("ab"), completion_tokens=2, engine_finished=True, length_reached=length_reached)
        assert (delta.text, delta.finish_reason) == ("ab", reason)


def test_a_stop_string_across_steps_is_held_back_then_cut():
    stream = OutputStream(_request(stop=["END"]), None, tokenizer=_CharTokenizer())
    one = stream.from_ids(_ids("hi E"), completion_tokens=4, engine_finished=False, length_reached=False)
    two = stream.from_ids(_ids("ND more"), completion_tokens=11, engine_finished=False, length_reached=False)
    assert (one.text, one.finish_reason) == ("hi ", None)  # "E" may start the stop string: held
    assert (two.text, two.finish_reason) == ("", "stop")


def test_held_text_is_output_when_the_request_ends_for_another_reason():
    stream = OutputStream(_request(stop=["END"]), None)
    assert stream.from_text("ok E", [], finish=None, completion_tokens=1, tokens=1).text == "ok "  # type: ignore[union-attr]
    last = stream.from_text("", [], finish="length", completion_tokens=2, tokens=0)
    assert last is not None and (last.text, last.finish_reason) == ("E", "length")


def test_text_held_as_a_stop_strings_start_is_dropped_when_the_engine_stopped_at_that_string():
    stream = OutputStream(_request(stop=["END"]), None)
    stream.from_text("ok EN", [], finish=None, completion_tokens=1, tokens=1)
    last = stream.from_text("", [], finish="stop", completion_tokens=2, tokens=0, engine_stopped_at_string=True)
    assert last is not None and (last.text, last.finish_reason) == ("", "stop")


def test_a_step_with_nothing_new_is_no_delta():
    stream = OutputStream(_request(), TokenRate())
    assert stream.from_text("", [], finish=None, completion_tokens=0, tokens=0) is None
    delta = stream.from_text("x", [7], finish=None, completion_tokens=1, tokens=1)
    assert delta is not None and (delta.text, delta.token_ids, delta.first_token_time is not None) == ("x", [7], True)


def test_stop_token_ids_include_eos_unless_ignored():
    assert stop_token_ids(SamplingParams(max_tokens=4, stop_token_ids=[5]), [2]) == {2, 5}
    assert stop_token_ids(SamplingParams(max_tokens=4, stop_token_ids=[5], ignore_eos=True), [2]) == {5}
