"""Tool argument schemas (JSON Schema) rewritten into the OpenAPI subset Gemini's `parameters` takes.

Gemini refuses a declaration with a key it does not know (`additionalProperties`, `$schema`,
`const`, …), a `type` list, or `required` naming a property that is not there; this keeps what
it knows, says `nullable` for `["x", "null"]`, turns `const` into a one-value `enum` and
`oneOf` into `anyOf`, and drops the rest.
"""

from __future__ import annotations

from typing import Any

_KEPT = frozenset(
    {
        "type",
        "format",
        "title",
        "description",
        "nullable",
        "enum",
        "default",
        "items",
        "minItems",
        "maxItems",
        "properties",
        "required",
        "propertyOrdering",
        "minProperties",
        "maxProperties",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "pattern",
        "anyOf",
    }
)
_FORMATS = {
    "string": {"enum", "date-time"},
    "integer": {"int32", "int64"},
    "number": {"float", "double"},
}


def to_gemini_schema(schema: Any) -> dict[str, Any]:
    """One schema node (recursively); anything that is not an object becomes `{}` (any value)."""
    if not isinstance(schema, dict):
        return {}
    node = dict(schema)
    if "const" in node and "enum" not in node:
        node["enum"] = [node["const"]]
    if "oneOf" in node and "anyOf" not in node:
        node["anyOf"] = node["oneOf"]
    out: dict[str, Any] = {}
    kind = node.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        if len(kinds) < len(kind):
            out["nullable"] = True
        kind = kinds[0] if len(kinds) == 1 else None
        if len(kinds) > 1:  # several types: one branch each
            out["anyOf"] = [to_gemini_schema({**node, "type": k}) for k in kinds]
    if isinstance(kind, str):
        out["type"] = kind
    for key, value in node.items():
        if key not in _KEPT or key in ("type", "anyOf") and key in out:
            continue
        if key == "properties" and isinstance(value, dict):
            if value:
                out[key] = {name: to_gemini_schema(sub) for name, sub in value.items()}
        elif key == "items":
            out[key] = to_gemini_schema(value)
        elif key == "anyOf" and isinstance(value, list):
            out[key] = [to_gemini_schema(v) for v in value]
        elif key == "enum" and isinstance(value, list):
            if out.get("type", "string") == "string":  # Gemini has enums of strings only
                out[key] = [str(v) for v in value]
                out["type"] = "string"
        elif key == "format":
            if value in _FORMATS.get(str(out.get("type")), ()):
                out[key] = value
        elif key != "type":
            out[key] = value
    if "required" in out:
        props = out.get("properties") or {}
        required = [r for r in out["required"] if isinstance(r, str) and r in props]
        if required:
            out["required"] = required
        else:
            del out["required"]
    if out.get("type") == "array" and "items" not in out:
        out["items"] = {"type": "string"}  # Gemini requires items on an array
    if "anyOf" in out:  # Gemini takes no type beside anyOf
        out.pop("type", None)
    return out


def tool_parameters(schema: Any) -> dict[str, Any] | None:
    """A tool's `parameters`, or None for a tool that takes no arguments (Gemini refuses an
    object schema with no properties)."""
    converted = to_gemini_schema(schema)
    if converted.get("type", "object") == "object" and not converted.get("properties"):
        return None
    return converted
