"""The serving layer's tokenizer without transformers gives the ids transformers gives: prompts (ASCII, Chinese,
special-token text) and chat templates, on the project's own generated tokenizers."""

from __future__ import annotations

import sys

import pytest
from transformers import AutoTokenizer

from core.errors import EngineConfigError
from engines.model_ref import resolve_model
from engines.tokenizer import FastTokenizer, load_tokenizer

TEXTS = ["The quick brown fox", "你好，世界！这是一个测试。", "  leading spaces and\nnew lines\t", "<|user|> hi"]
CONVERSATIONS = [
    [{"role": "user", "content": "Hello there"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "你好"},
        {"role": "assistant", "content": "Hi."},
        {"role": "user", "content": "And again?"},
    ],
]


@pytest.fixture(scope="module", params=["builtin:tiny", "builtin:small"])
def tokenizer_dir(request) -> str:
    return resolve_model(request.param)


def test_prompts_encode_to_the_ids_transformers_gives(tokenizer_dir):
    fast, reference = FastTokenizer.from_dir(tokenizer_dir), AutoTokenizer.from_pretrained(tokenizer_dir)
    assert len(fast) == len(reference)
    for text in TEXTS:
        assert fast.encode(text, add_special_tokens=True) == reference.encode(text, add_special_tokens=True)
        ids = reference.encode(text, add_special_tokens=False)
        assert fast.decode(ids, skip_special_tokens=True) == reference.decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_templates_render_to_the_ids_transformers_gives(tokenizer_dir, add_generation_prompt):
    fast, reference = FastTokenizer.from_dir(tokenizer_dir), AutoTokenizer.from_pretrained(tokenizer_dir)
    assert fast.chat_template == reference.chat_template
    for conversation in CONVERSATIONS:
        expected = reference.apply_chat_template(
            conversation, add_generation_prompt=add_generation_prompt, tokenize=True
        )
        if not isinstance(expected, list):
            expected = expected["input_ids"]
        assert fast.apply_chat_template(conversation, add_generation_prompt=add_generation_prompt) == list(expected)


def test_without_transformers_the_fallback_is_loaded(tokenizer_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    assert isinstance(load_tokenizer(tokenizer_dir), FastTokenizer)


def test_the_ingress_prompt_builder_runs_without_transformers(tokenizer_dir, monkeypatch):
    from serve_app.prompting import PromptBuilder

    with_transformers = PromptBuilder(tokenizer_dir)
    monkeypatch.setitem(sys.modules, "transformers", None)
    without = PromptBuilder(tokenizer_dir)
    assert isinstance(without.tokenizer, FastTokenizer)
    assert without.vocab_size == with_transformers.vocab_size
    assert without.completion(TEXTS[1]) == with_transformers.completion(TEXTS[1])


def test_a_directory_without_tokenizer_json_names_the_extra(tmp_path):
    with pytest.raises(EngineConfigError, match=r"\[hf\] extra"):
        FastTokenizer.from_dir(tmp_path)
