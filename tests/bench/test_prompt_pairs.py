import pytest

from bench.prompt_pairs import output_lengths, prompt_pairs, request_specs
from engines.builtin import build_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.mark.parametrize("length", [2, 17, 64])
def test_text_encodes_to_exactly_the_token_ids(tokenizer, length):
    pairs = prompt_pairs(tokenizer, 20, length)
    for pair in pairs:
        assert len(pair.token_ids) == length
        assert tokenizer.encode(pair.text) == pair.token_ids
    assert len({pair.text for pair in pairs}) > 1  # different prompts, not one repeated


def test_same_seed_same_prompts(tokenizer):
    assert prompt_pairs(tokenizer, 5, 16, seed=3) == prompt_pairs(tokenizer, 5, 16, seed=3)
    assert prompt_pairs(tokenizer, 5, 16, seed=3) != prompt_pairs(tokenizer, 5, 16, seed=4)


def test_impossible_length_is_an_error(tokenizer):
    with pytest.raises(ValueError, match="exactly 0 tokens"):
        prompt_pairs(tokenizer, 1, 0)


def test_specs_carry_text_or_ids(tokenizer):
    pairs = prompt_pairs(tokenizer, 3, 8)
    as_ids = request_specs(pairs, 5, as_text=False)
    as_text = request_specs(pairs, 5, as_text=True)
    assert [s.prompt for s in as_ids] == [p.token_ids for p in pairs]
    assert [s.prompt for s in as_text] == [p.text for p in pairs]
    assert all(s.max_tokens == 5 and s.prompt_tokens == 8 and s.send_at is None for s in as_ids + as_text)
    assert [s.index for s in as_ids] == [0, 1, 2]


def test_staggered_first_round_ends_at_spread_lengths_then_every_request_is_full_length(tokenizer):
    pairs = prompt_pairs(tokenizer, 10, 8)
    specs = request_specs(pairs, 100, as_text=False, staggered=4)
    assert [s.max_tokens for s in specs] == [25, 50, 75, 100] + [100] * 6
    assert output_lengths(3, 7, staggered=8) == [1, 2, 3]  # more workers than requests: each still asks for one
    assert output_lengths(3, 7) == [7, 7, 7]  # lockstep


def test_a_spread_varies_the_later_lengths_about_max_tokens_and_keeps_the_first_round():
    lengths = output_lengths(2000, 100, staggered=4, spread=0.25)

    assert lengths[:4] == [25, 50, 75, 100]
    later = lengths[4:]
    assert min(later) >= 75 and max(later) <= 125 and len(set(later)) > 40
    assert abs(sum(later) / len(later) - 100) < 2  # the mean stays max_tokens
    assert output_lengths(2000, 100, staggered=4, spread=0.25) == lengths  # seeded: the same on every path
    assert output_lengths(10, 100, staggered=4, spread=0.0)[4:] == [100] * 6
