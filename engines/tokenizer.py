"""A model's tokenizer for the serving layer, with or without transformers.

The ingress tokenizes prompts and renders chat templates (serve_app/prompting.py), and the ``openai_server``
backend may decode prompts for servers that take text. Both only need a model's ``tokenizer.json`` and chat
template, not transformers, which the serving layer must be installable without: TensorRT-LLM pins
``transformers==4.57.1``, the embedded engine needs >= 5.24 (the ``[hf]`` extra, docs/tensorrt-llm.md). So
:func:`load_tokenizer` returns transformers' ``AutoTokenizer`` where transformers is installed, else a
:class:`FastTokenizer` over the same files that answers the calls those two callers make, the same way: the
``tokenizers`` library for the ids, jinja2 for the template, set up as transformers sets it up
(``transformers/utils/chat_template_utils.py``: a sandboxed environment with ``trim_blocks`` and
``lstrip_blocks``, ``loopcontrols``, ``raise_exception``, ``strftime_now`` and a ``tojson`` that keeps
non-ASCII; the special tokens, ``messages``, ``tools``, ``documents`` and ``add_generation_prompt`` as variables;
the rendered text encoded without adding special tokens again). Templates using transformers' own
``{% generation %}`` tag are not supported by the fallback (a TemplateError: the client's 400).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from core.errors import EngineConfigError

_SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def load_tokenizer(path: str) -> Any:
    """transformers' AutoTokenizer for ``path`` where transformers is installed, else a :class:`FastTokenizer`."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return FastTokenizer.from_dir(path)
    return AutoTokenizer.from_pretrained(path)


def _token_text(value: Any) -> str | None:
    # tokenizer_config.json writes a special token as a string or as an AddedToken dict ({"content": ...}).
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _chat_template(path: Path, config: dict[str, Any]) -> str | None:
    # transformers 5 saves it beside the tokenizer (chat_template.jinja); 4.x inside tokenizer_config.json, as
    # a string or a list of named templates (the one called "default" is used).
    file = path / "chat_template.jinja"
    if file.is_file():
        return file.read_text(encoding="utf-8")
    template = config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None


class FastTokenizer:
    """``tokenizer.json`` + chat template without transformers: the calls of :mod:`serve_app.prompting`, the
    ``openai_server`` backend (``len()``, ``encode``, ``decode``, ``chat_template``, ``apply_chat_template``) and
    the emulated engine (``eos_token_id`` too)."""

    def __init__(self, tokenizer: Any, chat_template: str | None, special_tokens: dict[str, str]) -> None:
        self._tokenizer = tokenizer
        self.chat_template = chat_template
        self.special_tokens_map = special_tokens
        self._template: Any = None

    @classmethod
    def from_dir(cls, path: str | Path) -> FastTokenizer:
        from tokenizers import Tokenizer

        directory = Path(path)
        if not (directory / "tokenizer.json").is_file():
            raise EngineConfigError(
                f"{directory} has no tokenizer.json: without transformers only fast tokenizers load. Install the "
                "[hf] extra (pip install 'variant-serve[hf]') or point the tokenizer at a directory with one."
            )
        config_file = directory / "tokenizer_config.json"
        config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
        special = {key: text for key in _SPECIAL_TOKEN_KEYS if (text := _token_text(config.get(key))) is not None}
        tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        return cls(tokenizer, _chat_template(directory, config), special)

    def __len__(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    @property
    def eos_token_id(self) -> int | None:
        """The id of tokenizer_config.json's ``eos_token`` (None without one), as transformers gives it."""
        text = self.special_tokens_map.get("eos_token")
        return None if text is None else self._tokenizer.token_to_id(text)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        # The special tokens a model adds (BOS) come from tokenizer.json's post-processor, as in transformers.
        return list(self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self._tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(
        self,
        conversation: list[dict[str, Any]],
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        tools: list[dict[str, Any]] | None = None,
    ) -> list[int] | str:
        if self.chat_template is None:
            raise ValueError("this tokenizer has no chat template")
        text = self._compiled_template().render(
            messages=conversation,
            add_generation_prompt=add_generation_prompt,
            tools=tools,  # OpenAI's JSON, as transformers passes them
            documents=None,
            **self.special_tokens_map,
        )
        return self.encode(text, add_special_tokens=False) if tokenize else text

    def _compiled_template(self) -> Any:
        assert self.chat_template is not None
        if self._template is None:
            import jinja2.ext
            from jinja2.sandbox import ImmutableSandboxedEnvironment

            def raise_exception(message: str) -> None:
                raise jinja2.exceptions.TemplateError(message)

            def tojson(value: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
                       sort_keys: bool = False) -> str:  # fmt: skip
                return json.dumps(
                    value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
                )

            env = ImmutableSandboxedEnvironment(
                trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
            )
            env.filters["tojson"] = tojson
            env.globals["raise_exception"] = raise_exception
            env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
            self._template = env.from_string(self.chat_template)
        return self._template
