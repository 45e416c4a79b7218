"""A tool's output checked against its declared schemas in the SDK, with
the refusal the host would give (docs/protocol.md §7, "Schemas"): a chunk's
payload against ``output_schema``, completed's against ``result_schema``;
a media-only chunk has no payload and is not checked.

It needs the ``jsonschema`` package (Debian's ``python3-jsonschema``).
The host checks every provider payload anyway, so in production this is
optional (``serve(..., check_output=True)``); ``skulk.testing`` always
checks, so a handler tested without a host sees the same refusal.
"""

from __future__ import annotations

from typing import Any, Optional

from .errors import SchemaError
from .frames import JsonObject
from .wire import Schema

__all__ = ["OutputChecker", "describe"]

#: Each token of a field pointer is cut to this many characters, so that a
#: huge key cannot blow up a log line (the host's rule).
MAX_FIELD_TOKEN = 64


def describe(v: object) -> str:
    """What a JSON value is, without the value: its JSON type and size, as
    the host words it ("string of 12 bytes", "array of 3 items")."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, str):
        return f"string of {len(v.encode('utf-8', 'surrogatepass'))} bytes"
    if isinstance(v, (list, tuple)):
        return f"array of {len(v)} items"
    if isinstance(v, dict):
        return f"object of {len(v)} keys"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    return "value"


def _pointer(tokens: list[Any]) -> str:
    out = []
    for t in tokens:
        s = str(t)
        if len(s) > MAX_FIELD_TOKEN:
            s = s[:MAX_FIELD_TOKEN] + "…"
        out.append("/" + s.replace("~", "~0").replace("/", "~1"))
    return "".join(out)


def _lookup(v: Any, tokens: list[Any]) -> Any:
    for t in tokens:
        if isinstance(v, dict):
            v = v.get(t)
        elif isinstance(v, list) and isinstance(t, int) and 0 <= t < len(v):
            v = v[t]
        else:
            return None
    return v


class OutputChecker:
    """The compiled output_schema and result_schema of one tool. Compiling
    raises ImportError without the jsonschema package, and SchemaError
    ("output" or "result", keyword "$schema") for a schema that is not
    valid JSON Schema."""

    def __init__(self, output_schema: Optional[Schema], result_schema: Optional[Schema]) -> None:
        self._output = _compile("output", output_schema)
        self._result = _compile("result", result_schema)

    def check_output(self, payload: JsonObject) -> None:
        """Raise SchemaError if a chunk's payload breaks output_schema."""
        if self._output is not None:
            _check(self._output, "output", payload)

    def check_result(self, payload: JsonObject) -> None:
        """Raise SchemaError if completed's payload breaks result_schema."""
        if self._result is not None:
            _check(self._result, "result", payload)


def _compile(which: str, schema: Optional[Schema]) -> Any:
    if schema is None:
        return None
    import jsonschema
    import jsonschema.validators

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError:
        raise SchemaError(which, "", "$schema", "a schema that does not compile") from None
    return cls(schema)


def _check(validator: Any, which: str, payload: JsonObject) -> None:
    import jsonschema.exceptions

    err = jsonschema.exceptions.best_match(validator.iter_errors(payload))
    if err is None:
        return
    # The deepest first cause, as the host reports it.
    while err.context:
        err = err.context[0]
    loc = list(err.absolute_path)
    keyword = str(err.validator)
    if keyword == "required" and isinstance(err.instance, dict):
        missing = [k for k in err.validator_value if k not in err.instance]
        if missing:
            raise SchemaError(which, _pointer(loc + [missing[0]]), "required", "nothing")
    if keyword == "additionalProperties" and isinstance(err.instance, dict):
        props = err.schema.get("properties", {}) if isinstance(err.schema, dict) else {}
        extra = [k for k in err.instance if k not in props]
        if extra:
            loc = loc + [extra[0]]
            raise SchemaError(which, _pointer(loc), keyword, describe(_lookup(payload, loc)))
    raise SchemaError(which, _pointer(loc), keyword, describe(_lookup(payload, loc)))
