from router.explain import candidates_header, parse_candidates
from router.types import Prediction


def test_every_candidate_and_its_figures_survive_the_header():
    predictions = {
        "small": Prediction(
            ttft_ms=212.6,
            tpot_ms=23.71,
            meets_slo=True,
            queued_tokens_ahead=5120.4,
            ttft_upper_ms=340.2,
            tpot_upper_ms=30.06,
            waiting_for_slot=0.0,
            slowdown=1.123,
            cached_tokens=4096,
        ),
        "large": Prediction(ttft_ms=832.0, tpot_ms=46.2, meets_slo=False, ttft_upper_ms=1210.0, tpot_upper_ms=55.0),
    }
    parsed = parse_candidates(candidates_header(predictions))
    assert list(parsed) == ["small", "large"]
    assert parsed["small"] == {
        "ttft": 213.0,
        "ttft_up": 340.0,
        "tpot": 23.7,
        "tpot_up": 30.1,
        "ahead": 5120.0,
        "slot": 0.0,
        "slowdown": 1.12,
        "cached": 4096.0,
        "met": 1.0,
    }
    assert parsed["large"]["met"] == 0.0 and parsed["large"]["ttft_up"] == 1210.0


def test_an_absent_empty_or_garbled_header_parses_to_what_it_holds():
    assert parse_candidates(None) == {} == parse_candidates("") == parse_candidates(" ; ")
    assert candidates_header({}) == ""
    assert parse_candidates("a ttft=1 tpot=x; b") == {"a": {"ttft": 1.0}}
