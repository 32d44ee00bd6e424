import random

import pytest

from engines.builtin import build_tokenizer
from engines.detokenizer import IncrementalDetokenizer

CHINESE_AND_EMOJI = "今天早上天气很好 ☀️，我们去公园散步 🐱🎉。学习一门新的语言需要时间和耐心 🙏！"
ASCII = "The train to the city left at seven and arrived at nine. def f(x): return x + 1"


@pytest.fixture(scope="module")
def tokenizer():
    # The builtin tokenizer alone: byte-level BPE, so Chinese and emoji split inside characters.
    return build_tokenizer()


def stream(detok: IncrementalDetokenizer, ids: list[int], sizes: list[int]) -> list[str]:
    pieces, i = [], 0
    for size in sizes:
        pieces.append(detok.add(ids[i : i + size]))
        i += size
    assert i >= len(ids)
    pieces.append(detok.flush())
    return pieces


def test_the_text_really_splits_characters_across_tokens(tokenizer):
    # Guards the tests below: they only mean something if single tokens hold partial characters.
    ids = tokenizer.encode(CHINESE_AND_EMOJI, add_special_tokens=False)
    assert any("\ufffd" in tokenizer.decode([t]) for t in ids)


@pytest.mark.parametrize("text", [CHINESE_AND_EMOJI, ASCII])
def test_one_token_at_a_time(tokenizer, text):
    ids = tokenizer.encode(text, add_special_tokens=False)
    pieces = stream(IncrementalDetokenizer(tokenizer), ids, [1] * len(ids))
    assert all("\ufffd" not in p for p in pieces)
    assert "".join(pieces) == tokenizer.decode(ids) == text


@pytest.mark.parametrize("seed", range(5))
def test_random_chunk_sizes(tokenizer, seed):
    rng = random.Random(seed)
    ids = tokenizer.encode(CHINESE_AND_EMOJI * 3, add_special_tokens=False)
    sizes = [rng.randint(0, 5) for _ in range(len(ids))]  # 0: an engine step that produced nothing
    pieces = stream(IncrementalDetokenizer(tokenizer), ids, sizes)
    assert all("\ufffd" not in p for p in pieces)
    assert "".join(pieces) == tokenizer.decode(ids)


def test_special_tokens_are_skipped_or_kept(tokenizer):
    ids = tokenizer.encode("<|assistant|>你好，world<|eos|>", add_special_tokens=False)
    skipped = "".join(stream(IncrementalDetokenizer(tokenizer), ids, [1] * len(ids)))
    assert skipped == "你好，world" == tokenizer.decode(ids, skip_special_tokens=True)
    kept = "".join(stream(IncrementalDetokenizer(tokenizer, skip_special_tokens=False), ids, [1] * len(ids)))
    assert kept == "<|assistant|>你好，world<|eos|>"


def test_prompt_context_does_not_appear_in_the_output(tokenizer):
    prompt = tokenizer.encode("我们的城市不大，", add_special_tokens=False)
    ids = tokenizer.encode("但是很安静。", add_special_tokens=False)
    detok = IncrementalDetokenizer(tokenizer, prompt_token_ids=prompt)
    assert "".join(stream(detok, ids, [1] * len(ids))) == "但是很安静。"


class CountingTokenizer:
    """Records how many ids each decode call sees."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.lengths: list[int] = []

    def decode(self, ids, **kwargs):
        self.lengths.append(len(ids))
        return self.tokenizer.decode(ids, **kwargs)


def test_each_call_decodes_a_small_window_not_the_whole_sequence(tokenizer):
    counting = CountingTokenizer(tokenizer)
    ids = tokenizer.encode(CHINESE_AND_EMOJI * 20, add_special_tokens=False)
    pieces = stream(IncrementalDetokenizer(counting), ids, [1] * len(ids))
    assert "".join(pieces) == tokenizer.decode(ids)
    assert len(ids) > 500 and max(counting.lengths) <= 10


def test_invalid_bytes_are_not_held_forever(tokenizer):
    # Byte 0xE4 opens a three-byte character; a run of them never completes one, so the detokenizer must
    # give up waiting and emit U+FFFD instead of holding the stream back until the end.
    lead_byte = tokenizer.convert_tokens_to_ids("\u00e4")  # byte 0xE4 in the byte-level alphabet
    assert tokenizer.decode([lead_byte]) == "\ufffd"
    detok = IncrementalDetokenizer(tokenizer)
    early = "".join(detok.add([lead_byte]) for _ in range(30))
    assert "\ufffd" in early
    assert early + detok.flush() == tokenizer.decode([lead_byte] * 30)


def test_a_large_chunk_ending_inside_a_character_holds_back_only_its_tail(tokenizer):
    text = "我们的城市不大，但是很安静。"
    ids = tokenizer.encode(text, add_special_tokens=False)
    # Cut at every token boundary that falls inside a character, as a coalescing engine might.
    cuts = [n for n in range(1, len(ids)) if tokenizer.decode(ids[:n]).endswith("\ufffd")]
    assert cuts
    for n in cuts:
        detok = IncrementalDetokenizer(tokenizer)
        first = detok.add(ids[:n])
        assert "\ufffd" not in first and text.startswith(first)
        assert len(first) >= len(tokenizer.decode(ids[:n])) - 2  # at most the broken character is held
        assert first + detok.add(ids[n:]) + detok.flush() == text
