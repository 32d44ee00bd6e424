"""Turning an OpenAI prompt or message list into token ids, with the public model's tokenizer.

The ingress tokenizes once, before routing: the router needs the prompt length, and every variant under one
public model shares the tokenizer (they are variants of one model family), so engines receive token ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jinja2 import TemplateError

from core.errors import InvalidRequestError
from engines.tokenizer import load_tokenizer
from serve_app.openai_api import ChatMessage


def _check_encodable(text: str, param: str) -> None:
    """A lone UTF-16 surrogate ("\\ud800" in JSON) is no text: the tokenizer cannot encode it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidRequestError(
            f"'{param}' holds a character that is not valid Unicode text (at {e.start}): {e.reason}.", param=param
        ) from None


def _first_unusual(messages: Sequence[ChatMessage]) -> str:
    """The message most likely refused by a template: the first tool message or call, else the list."""
    for index, message in enumerate(messages):
        if message.role == "tool" or message.tool_calls:
            return f"messages[{index}]"
    return "messages"


class PromptBuilder:
    def __init__(self, tokenizer_ref: str) -> None:
        from engines.model_ref import resolve_model

        # transformers' AutoTokenizer where it is installed, else the same files without it (engines/tokenizer.py):
        # the serving layer installs without torch and transformers.
        self.tokenizer = load_tokenizer(resolve_model(tokenizer_ref))
        self.vocab_size = len(self.tokenizer)

    def completion(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            _check_encodable(prompt, "prompt")
            ids = list(self.tokenizer.encode(prompt, add_special_tokens=True))
            if not ids:
                raise InvalidRequestError("The prompt is empty: send at least one token.", param="prompt")
            return ids
        if not prompt:
            raise InvalidRequestError("The prompt is empty: send at least one token.", param="prompt")
        bad = next((t for t in prompt if not 0 <= t < self.vocab_size), None)
        if bad is not None:
            raise InvalidRequestError(
                f"Prompt token id {bad} is outside the vocabulary (size {self.vocab_size}).", param="prompt"
            )
        return list(prompt)

    def text(self, prompt: str | list[int]) -> str:
        """The prompt as text, for ``echo``: a token-id prompt decoded as outputs are (special tokens left out)."""
        return prompt if isinstance(prompt, str) else str(self.tokenizer.decode(prompt))

    def chat(self, messages: Sequence[ChatMessage], tools: list[dict[str, Any]] | None = None) -> list[int]:
        """The prompt of a conversation; with ``tools`` (OpenAI's JSON) the template renders them, or the request is
        refused naming ``tools``: a template that ignores them would drop them silently."""
        if not getattr(self.tokenizer, "chat_template", None):
            raise InvalidRequestError("This model has no chat template: use /v1/completions.", param="messages")
        conversation = []
        for index, message in enumerate(messages):
            try:
                rendered = message.for_template()
            except ValueError as e:
                raise InvalidRequestError(str(e), param=f"messages[{index}].content") from None
            _check_encodable(rendered["content"], f"messages[{index}].content")
            conversation.append(rendered)
        try:
            if tools:
                self._check_renders_tools(conversation, tools)
            ids: Any = self.tokenizer.apply_chat_template(
                conversation, add_generation_prompt=True, tokenize=True, **({"tools": tools} if tools else {})
            )
        except TemplateError as e:
            # The template's own refusal (an unsupported role, tool calls it cannot render): the client's message.
            raise InvalidRequestError(
                f"This model's chat template cannot render these messages: {e}", param=_first_unusual(messages)
            ) from None
        if not isinstance(ids, list):  # transformers 5 may return a BatchEncoding
            ids = ids["input_ids"]
        return list(ids)

    def _check_renders_tools(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None:
        """Refuses tools the template does not render (the same text with and without them): the model would not
        know them, and a client would think it had offered them."""
        plain = self.tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
        try:
            with_tools = self.tokenizer.apply_chat_template(
                conversation, add_generation_prompt=True, tokenize=False, tools=tools
            )
        except (TemplateError, TypeError) as e:  # the template choked on these tools (a field it expects, ...)
            raise InvalidRequestError(
                f"This model's chat template cannot render these tools: {e}", param="tools"
            ) from None
        if plain == with_tools:
            raise InvalidRequestError(
                "This model's chat template does not render tools, so the model could not call them: remove "
                "'tools' (or send tool_choice 'none'), or use a model whose template supports tool calling.",
                param="tools",
            )
