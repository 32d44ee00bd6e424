"""PromptBuilder.chat with tools: a template that renders them gets them, one that ignores them or cannot render
them refuses them naming 'tools' (the model would never see the tools the client offered)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import InvalidRequestError
from serve_app.openai_api import ChatMessage
from serve_app.prompting import PromptBuilder

TOOLS = [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]
MESSAGES = [ChatMessage(role="user", content="What time is it?")]
LOOP = (
    "{%- for message in messages -%}{{- '<|' + message['role'] + '|>' + message['content'] + eos_token -}}"
    "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|assistant|>' -}}{%- endif -%}"
)
RENDERS = "{%- if tools -%}{{- '<|system|>' + tools | tojson + eos_token -}}{%- endif -%}" + LOOP
NEEDS_DESCRIPTION = "{%- for t in tools or [] -%}{{- t['function']['description'] + 1 -}}{%- endfor -%}" + LOOP


def builder(directory: Path, template: str) -> PromptBuilder:
    from transformers import AutoTokenizer

    from engines.model_ref import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("builtin:tiny"))
    tokenizer.chat_template = template
    tokenizer.save_pretrained(directory)
    return PromptBuilder(str(directory))


def test_a_template_that_renders_tools_gets_them(tmp_path):
    prompts = builder(tmp_path, RENDERS)
    assert len(prompts.chat(MESSAGES, TOOLS)) > len(prompts.chat(MESSAGES))
    assert prompts.tokenizer.decode(prompts.chat(MESSAGES, TOOLS)).count("get_time") == 1


@pytest.mark.parametrize("template", [LOOP, NEEDS_DESCRIPTION], ids=["ignores", "cannot-render"])
def test_a_template_that_does_not_render_the_tools_refuses_them_by_name(tmp_path, template):
    prompts = builder(tmp_path, template)
    with pytest.raises(InvalidRequestError) as err:
        prompts.chat(MESSAGES, TOOLS)
    assert err.value.param == "tools"
    assert prompts.chat(MESSAGES)  # without tools the conversation renders
