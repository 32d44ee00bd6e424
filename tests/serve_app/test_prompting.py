"""The ingress's prompts: OpenAI roles onto the chat template, and what a tokenizer cannot take refused with a 400."""

from __future__ import annotations

import pytest

from core.errors import InvalidRequestError
from serve_app.openai_api import ChatMessage
from serve_app.prompting import PromptBuilder


@pytest.fixture(scope="module")
def prompts() -> PromptBuilder:
    return PromptBuilder("builtin:tiny")


def test_developer_is_rendered_as_the_templates_system_role(prompts):
    as_developer = prompts.chat(
        [ChatMessage(role="developer", content="Be brief."), ChatMessage(role="user", content="Hi")]
    )
    as_system = prompts.chat([ChatMessage(role="system", content="Be brief."), ChatMessage(role="user", content="Hi")])
    assert as_developer == as_system


def test_a_role_the_template_refuses_is_a_400_naming_the_message(prompts):
    messages = [ChatMessage(role="user", content="Hi"), ChatMessage(role="tool", content="42", tool_call_id="c1")]
    with pytest.raises(InvalidRequestError, match="Unsupported role: tool") as err:
        prompts.chat(messages)
    assert err.value.param == "messages[1]"


def test_tool_fields_reach_templates_that_take_them():
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    message = ChatMessage(role="assistant", content=None, tool_calls=[call]).for_template()
    assert message == {"role": "assistant", "content": "", "tool_calls": [call]}
    assert ChatMessage(role="tool", content="42", tool_call_id="c1").for_template()["tool_call_id"] == "c1"


@pytest.mark.parametrize("text", ["\ud800", "ok \udfff then"])
def test_lone_surrogates_are_a_400_naming_the_field(prompts, text):
    with pytest.raises(InvalidRequestError) as err:
        prompts.completion(text)
    assert err.value.param == "prompt"
    with pytest.raises(InvalidRequestError) as err:
        prompts.chat([ChatMessage(role="user", content="fine"), ChatMessage(role="user", content=text)])
    assert err.value.param == "messages[1].content"


@pytest.mark.parametrize("prompt", ["", []])
def test_an_empty_prompt_is_refused_before_routing(prompts, prompt):
    with pytest.raises(InvalidRequestError, match="empty") as err:
        prompts.completion(prompt)
    assert err.value.param == "prompt"


def test_four_byte_characters_and_nul_are_text(prompts):
    assert prompts.completion("emoji 🙂 and \x00 nul")


def test_echo_text_is_the_prompt_or_its_ids_decoded(prompts):
    assert prompts.text("The river") == "The river"
    ids = prompts.tokenizer.encode("The river", add_special_tokens=False)
    assert prompts.text(list(ids)) == "The river"
