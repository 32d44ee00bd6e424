"""Turning an OpenAI prompt or message list into token ids, with the public model's tokenizer.

The ingress tokenizes once, before routing: the router needs the prompt length, and every variant under one
public model shares the tokenizer (they are variants of one model family), so engines receive token ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engines.errors import InvalidRequestError
from serve_app.openai_api import ChatMessage


class PromptBuilder:
    def __init__(self, tokenizer_ref: str) -> None:
        from transformers import AutoTokenizer

        from engines.builtin import resolve_model

        self.tokenizer = AutoTokenizer.from_pretrained(resolve_model(tokenizer_ref))
        self.vocab_size = len(self.tokenizer)

    def completion(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            return list(self.tokenizer.encode(prompt, add_special_tokens=True))
        bad = next((t for t in prompt if not 0 <= t < self.vocab_size), None)
        if bad is not None:
            raise InvalidRequestError(
                f"Prompt token id {bad} is outside the vocabulary (size {self.vocab_size}).", param="prompt"
            )
        return list(prompt)

    def chat(self, messages: Sequence[ChatMessage]) -> list[int]:
        if not getattr(self.tokenizer, "chat_template", None):
            raise InvalidRequestError("This model has no chat template: use /v1/completions.", param="messages")
        try:
            conversation = [{"role": m.role, "content": m.text()} for m in messages]
        except ValueError as e:
            raise InvalidRequestError(str(e), param="messages") from None
        ids: Any = self.tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=True)
        if not isinstance(ids, list):  # transformers 5 may return a BatchEncoding
            ids = ids["input_ids"]
        return list(ids)
