"""What a guided "model" writes, shared by both fakes (tensorrt_llm/ and trtllm_serve.py): the smallest JSON value a
schema accepts, and whether a text satisfies a guide (jsonschema, a dev dependency: only the fakes use it)."""

import json
import re
from typing import Any


def minimal_instance(schema: dict):
    """The smallest JSON value a (simple) JSON schema accepts: what a guided "model" that wants to stop at once
    writes. Enough for the schemas the tests and tool calls use (object / properties / required / const / enum /
    anyOf / the scalar types)."""
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return minimal_instance(schema[key][0])
    kind = schema.get("type", "object")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        props = schema.get("properties", {})
        return {name: minimal_instance(props.get(name, {})) for name in schema.get("required", [])}
    return {"array": [], "string": "", "integer": 0, "number": 0, "boolean": False, "null": None}[kind]


def satisfies(text: str, *, schema: Any = None, regex: str | None = None, json_object: bool = False) -> bool:
    """Whether ``text`` is one the guide allows (a schema: valid against it, with jsonschema)."""
    if regex is not None:
        return re.fullmatch(regex, text) is not None
    try:
        value = json.loads(text)
    except ValueError:
        return False
    if json_object:
        return isinstance(value, dict)
    import jsonschema

    schema = json.loads(schema) if isinstance(schema, str) else schema
    return jsonschema.Draft202012Validator(schema).is_valid(value)
