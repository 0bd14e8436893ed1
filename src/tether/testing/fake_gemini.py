"""The fake's Gemini dialect: `streamGenerateContent?alt=sse` events from a script turn, and the
checks a real Gemini endpoint makes of a request (roles, paired function responses, schemas).

Standard library only, like the other fake dialects. Script turn keys beyond the common ones:
`finish` (a finishReason such as SAFETY or RECITATION, sent after the text) and `block` (a
promptFeedback blockReason: no candidates at all).
"""

from __future__ import annotations

import json
from typing import Any

from tether.testing.fake_dialects import NextId, Plan

# Keys Gemini's function `parameters` (its OpenAPI subset) does not take.
REFUSED_SCHEMA_KEYS = frozenset(
    {"additionalProperties", "$schema", "$ref", "$defs", "definitions", "const", "oneOf", "allOf",
     "not", "patternProperties", "exclusiveMinimum", "exclusiveMaximum", "examples"}
)  # fmt: skip


def _data(obj: Any) -> bytes:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\r\n\r\n".encode()


def gemini_events(plan: Plan, model: str, next_id: NextId, turn: dict[str, Any]) -> list[bytes]:
    usage = {
        "promptTokenCount": plan.usage_in + plan.cached,
        "candidatesTokenCount": plan.usage_out,
        "totalTokenCount": plan.usage_in + plan.cached + plan.usage_out,
    }
    if plan.cached:
        usage["cachedContentTokenCount"] = plan.cached
    if plan.thinking:
        usage["thoughtsTokenCount"] = max(1, len(plan.thinking) // 4)
        usage["totalTokenCount"] += usage["thoughtsTokenCount"]
    version = model
    response_id = f"resp-{next_id()}"

    def chunk(parts: list[dict[str, Any]], **candidate: Any) -> bytes:
        cand = {"content": {"role": "model", "parts": parts}, "index": 0, **candidate}
        return _data({"candidates": [cand], "usageMetadata": usage, "modelVersion": version,
                      "responseId": response_id})  # fmt: skip

    if turn.get("block"):
        return [_data({"promptFeedback": {"blockReason": turn["block"], "safetyRatings": [
            {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}
        ]}, "usageMetadata": {"promptTokenCount": plan.usage_in, "totalTokenCount": plan.usage_in},
            "modelVersion": version})]  # fmt: skip
    events = [chunk([{"text": p, "thought": True}]) for p in plan.pieces(plan.thinking)]
    signature = f"sig-{next_id()}" if plan.thinking else None
    for piece in plan.pieces(plan.text):
        part: dict[str, Any] = {"text": piece}
        if signature and not plan.tool_calls:
            part["thoughtSignature"], signature = signature, None
        events.append(chunk([part]))
    if plan.tool_calls:  # Gemini sends each call whole; parallel calls share one chunk
        parts = []
        for call in plan.tool_calls:
            fc: dict[str, Any] = {"name": call.name, "args": json.loads(call.arguments or "{}")}
            if call.id != "":  # current models id every call; "" stands for older ones that did not
                fc["id"] = call.id or f"fc-{next_id()}"
            part = {"functionCall": fc}
            if signature:  # only the first call of a thinking turn carries the signature
                part["thoughtSignature"], signature = signature, None
            parts.append(part)
        events.append(chunk(parts))
    finish = turn.get("finish") or ("MAX_TOKENS" if plan.max_tokens else "STOP")
    extra: dict[str, Any] = {"finishReason": finish}
    if finish == "SAFETY":
        extra["safetyRatings"] = [
            {"category": "HARM_CATEGORY_HARASSMENT", "probability": "HIGH", "blocked": True},
            {"category": "HARM_CATEGORY_HATE_SPEECH", "probability": "NEGLIGIBLE"},
        ]
    events.append(chunk([{"text": ""}], **extra))
    return events


def check_gemini(body: dict[str, Any], headers: dict[str, str]) -> list[str]:
    """What Gemini would answer 400 to (or 403, for a missing key: reported the same way here)."""
    problems: list[str] = []
    if not headers.get("x-goog-api-key"):
        problems.append("no x-goog-api-key header")
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        return [*problems, "contents must be a non-empty list"]
    pending: list[str] = []  # names of the calls the previous model turn made
    pending_ids: list[Any] = []  # their ids (None where a call had none)
    for n, content in enumerate(contents):
        role = content.get("role") if isinstance(content, dict) else None
        parts = content.get("parts") if isinstance(content, dict) else None
        if role not in ("user", "model") or not isinstance(parts, list) or not parts:
            problems.append(f"contents[{n}] needs role user|model and non-empty parts")
            continue
        if n and contents[n - 1].get("role") == role:
            problems.append(f"contents[{n}] repeats role {role}")
        if n == 0 and role != "user":
            problems.append("the first content must be the user's")
        responses = [p["functionResponse"].get("name") for p in parts if "functionResponse" in p]
        if pending and responses != pending:
            problems.append(
                f"contents[{n}]: function responses {responses} do not answer the calls {pending}"
            )
        response_ids = [p["functionResponse"].get("id") for p in parts if "functionResponse" in p]
        if any(i is not None for i in response_ids) and response_ids != pending_ids:
            problems.append(
                f"contents[{n}]: function response ids {response_ids} do not match the ids of "
                f"the calls {pending_ids}"
            )
        calls = [p["functionCall"] for p in parts if "functionCall" in p] if role == "model" else []
        pending = [c.get("name") for c in calls]
        pending_ids = [c.get("id") for c in calls]
        for p in parts:
            if "text" in p and not isinstance(p["text"], str):
                problems.append(f"contents[{n}]: text must be a string")
    for tool in body.get("tools") or []:
        for decl in tool.get("functionDeclarations") or []:
            bad = sorted(_refused_keys(decl.get("parameters")))
            if bad:
                problems.append(f"function {decl.get('name')}: parameters use unsupported {bad}")
    return problems


def _refused_keys(schema: Any) -> set[str]:
    if isinstance(schema, list):
        return set().union(*(_refused_keys(s) for s in schema)) if schema else set()
    if not isinstance(schema, dict):
        return set()
    found = {k for k in schema if k in REFUSED_SCHEMA_KEYS}
    if isinstance(schema.get("type"), list):
        found.add("type list")
    for key in ("items", "anyOf"):
        found |= _refused_keys(schema.get(key))
    for sub in (schema.get("properties") or {}).values():
        found |= _refused_keys(sub)
    return found


def gemini_error(status: int, message: str) -> dict[str, Any]:
    names = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
             429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}  # fmt: skip
    return {"error": {"code": status, "message": message, "status": names.get(status, "UNKNOWN")}}
