"""Tool calls: the request's tools, the JSON schema of a call (what guided decoding enforces when ``tool_choice``
requires one), and the model's output read back as OpenAI's ``tool_calls``.

A model calls a tool by writing a JSON object ``{"name": ..., "arguments": {...}}``: the payload of the
``<tool_call>`` tags of Hermes-style templates (Qwen 2.5 / 3, Hermes), and with ``parameters`` for ``arguments`` the
JSON tool calls of Llama 3.1+ templates. Read back here: an output that *starts* with such a call (bare, as a JSON
list, or in ``<tool_call>`` tags, one or more in a row) and holds nothing else is its calls, each naming a declared
tool with an object of arguments; anything else is the message's content, as it would be without tools. Deciding
from the start lets a stream pass plain text on at once and hold back only what may be a call (the same rule
streamed and whole, so both give the same answer). Arguments are checked to be a JSON object, not against the
tool's schema: the engine's guided decoding enforces that where a call is required.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
_TAGGED = re.compile(r"\s*<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)


class FunctionDefinition(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="What the model calls it.")
    description: str | None = None
    parameters: dict[str, Any] | None = Field(None, description="A JSON schema of the arguments object.")
    strict: bool | None = None


class Tool(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str


class NamedToolChoice(BaseModel):
    """``{"type": "function", "function": {"name": ...}}``: this tool must be called."""

    model_config = ConfigDict(extra="ignore")
    type: Literal["function"]
    function: NamedFunction


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


def call_schema(tools: Sequence[Tool], only: str | None = None) -> dict[str, Any]:
    """The JSON schema of one call of ``tools`` (of the tool named ``only``): what guided decoding makes the model
    write when ``tool_choice`` requires a call."""
    options = [
        {
            "type": "object",
            "properties": {
                "name": {"const": t.function.name},
                "arguments": t.function.parameters or {"type": "object"},
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for t in tools
        if only is None or t.function.name == only
    ]
    return options[0] if len(options) == 1 else {"anyOf": options}


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: str  # a JSON object, as OpenAI sends it (a string)
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")

    def as_openai(self, index: int | None = None) -> dict[str, Any]:
        """OpenAI's shape: a message's ``tool_calls`` item, or with ``index`` a streamed delta's."""
        call: dict[str, Any] = {"id": self.id, "type": "function"}
        call["function"] = {"name": self.name, "arguments": self.arguments}
        return call if index is None else {"index": index, **call}


def _one_call(value: Any, names: frozenset[str]) -> ToolCall | None:
    if not isinstance(value, dict) or value.get("name") not in names:
        return None
    arguments = value.get("arguments", value.get("parameters"))
    if isinstance(arguments, str):  # some models write the arguments as a JSON string, as OpenAI sends them
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ToolCall(value["name"], json.dumps(arguments, ensure_ascii=False))


def _json_calls(text: str, names: frozenset[str]) -> list[ToolCall] | None:
    """The calls in ``text`` when it is one JSON object or list of them, each a call; None otherwise."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    values = value if isinstance(value, list) and value else [value]
    calls = [_one_call(v, names) for v in values]
    return None if any(c is None for c in calls) else calls  # type: ignore[return-value]


def parse_calls(text: str, names: frozenset[str]) -> list[ToolCall] | None:
    """The tool calls ``text`` consists of, or None when it is content (see the module docstring)."""
    stripped = text.strip()
    if not stripped.startswith(TOOL_CALL_OPEN):
        return _json_calls(stripped, names) if stripped[:1] in ("{", "[") else None
    calls: list[ToolCall] = []
    end = 0
    for match in _TAGGED.finditer(stripped):
        if match.start() != end:
            return None  # text between calls: not calls alone
        found = _json_calls(match.group(1).strip(), names)
        if found is None:
            return None
        calls.extend(found)
        end = match.end()
    return calls if calls and not stripped[end:].strip() else None


def may_be_a_call(text: str) -> bool | None:
    """Whether an output that begins with ``text`` may be tool calls: True / False once its first characters
    tell, None while they do not yet (nothing but whitespace, or a prefix of ``<tool_call>``)."""
    start = text.lstrip()
    if not start:
        return None
    if start[0] in "{[" or start.startswith(TOOL_CALL_OPEN):
        return True
    return None if TOOL_CALL_OPEN.startswith(start) else False
