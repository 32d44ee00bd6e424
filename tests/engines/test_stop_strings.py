import pytest

from core.errors import InvalidRequestError
from engines.stop_strings import StopStringMatcher


def feed_all(matcher: StopStringMatcher, pieces: list[str]) -> tuple[str, bool]:
    out = []
    for piece in pieces:
        text, stopped = matcher.feed(piece)
        out.append(text)
        if stopped:
            return "".join(out), True
    return "".join(out) + matcher.flush(), False


def test_stop_split_across_many_feeds_never_leaks():
    matcher = StopStringMatcher(["<END>"])
    emitted = []
    for piece in ["Hello ", "wor", "ld<", "E", "N", "D", ">", " after"]:
        text, stopped = matcher.feed(piece)
        emitted.append(text)
        assert "<" not in text
        if stopped:
            break
    assert stopped
    assert "".join(emitted) == "Hello world"
    assert matcher.feed("more") == ("", True)
    assert matcher.flush() == ""


def test_partial_prefix_that_is_not_a_stop_is_emitted():
    matcher = StopStringMatcher(["STOP"])
    assert matcher.feed("ab ST") == ("ab ", False)  # "ST" might start "STOP": held back
    assert matcher.feed("ORM") == ("STORM", False)  # decided: not a stop
    assert matcher.feed("S") == ("", False)
    assert matcher.flush() == "S"


def test_stop_and_text_after_it_in_one_piece():
    assert StopStringMatcher(["\n\n"]).feed("line one\n\nline two") == ("line one", True)


def test_multiple_stops_earliest_wins():
    matcher = StopStringMatcher(["world", "lo w"])
    assert feed_all(matcher, ["hel", "lo wo", "rld"]) == ("hel", True)


def test_multiple_stops_overlapping_prefixes_are_held_by_the_longest():
    matcher = StopStringMatcher(["abc", "bd"])
    assert matcher.feed("xab") == ("x", False)  # "ab" could start "abc"
    assert matcher.feed("d") == ("a", True)  # "bd" completes


def test_chinese_stop_string():
    assert feed_all(StopStringMatcher(["。"]), ["今天天", "气很好", "。明天"]) == ("今天天气很好", True)


def test_stream_ending_without_stop_flushes_held_text():
    assert feed_all(StopStringMatcher(["</answer>"]), ["42 </ans"]) == ("42 </ans", False)


def test_no_stops_is_pass_through():
    matcher = StopStringMatcher([])
    assert matcher.feed("anything at all") == ("anything at all", False)
    assert matcher.flush() == ""


@pytest.mark.parametrize("stops", [[""], ["ok", ""], "STOP", [3]])
def test_invalid_stops_name_the_field(stops):
    with pytest.raises(InvalidRequestError) as info:
        StopStringMatcher(stops)
    assert info.value.param == "stop"


def test_a_megabyte_stop_string_costs_no_more_than_its_length():
    # The matcher once built every prefix of every stop string: quadratic, so a client's 1 MB stop hung the engine.
    stop = "s" * 1_000_000
    matcher = StopStringMatcher([stop])
    assert matcher.feed("hello ") == ("hello ", False)
    assert matcher.feed("sss") == ("", False)  # could be the stop's start: held back
    assert matcher.flush() == "sss"
