"""Message builders and hypothesis strategies shared by the local-store tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from hypothesis import strategies as st

from tether.protocol.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    ToolResultMessage,
    Usage,
    UserMessage,
    message_to_dict,
)
from tether.protocol.tool_calls import ToolCall


def user(mid: str, text: str = "hello") -> UserMessage:
    return UserMessage(mid, (TextPart(text),), 1_700_000_000_000)


def assistant(
    mid: str, *calls: tuple[str, str], text: str = "ok", stop: str | None = "endTurn"
) -> AssistantMessage:
    parts: tuple[Any, ...] = (TextPart(text),) + tuple(
        ToolCall(cid, name, {"command": "ls"}) for cid, name in calls
    )
    return AssistantMessage(mid, parts, 1_700_000_000_001, stop_reason=stop)


def result(mid: str, call_id: str, text: str = "done") -> ToolResultMessage:
    return ToolResultMessage(mid, call_id, "Bash", (TextPart(text),), False, 1_700_000_000_002)


def write_big_transcript(path: Path, n: int) -> None:
    """A valid transcript of `n` message entries (user / assistant with a call / result)."""
    header = {"type": "session", "version": 3, "id": "x", "timestamp": "t", "cwd": "/"}
    kinds: list[Message] = [
        user("u", "please fix the failing test in foo.py"),
        assistant("a", ("call", "Bash"), text="Let me look at the test first."),
        result("r", "call", "foo.py::test_bar FAILED\nAssertionError: 1 != 2\n"),
    ]
    chunks = [orjson.dumps(header), b"\n"]
    parent = None
    for i in range(n):
        d = message_to_dict(kinds[i % 3])
        d["id"] = f"m{i}"
        eid = f"{i:08x}"
        entry = {"type": "message", "id": eid, "parentId": parent, "timestamp": "t", "message": d}
        chunks += [orjson.dumps(entry), b"\n"]
        parent = eid
    path.write_bytes(b"".join(chunks))


# --- strategies ---------------------------------------------------------------------------

_text = st.text(max_size=40)
_ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_json_scalar = (
    st.none() | st.booleans() | _ints | st.floats(allow_nan=False, allow_infinity=False) | _text
)
_json = st.recursive(
    _json_scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_ts = st.integers(min_value=0, max_value=2**53)
_opt_text = st.none() | _text

text_parts = st.builds(TextPart, _text)
image_parts = st.builds(ImagePart, _text, _text)
thinking_parts = st.builds(ThinkingPart, _text, _opt_text)
call_parts = st.builds(ToolCall, _text, _text, st.dictionaries(_text, _json, max_size=3))
usages = st.none() | st.builds(Usage, *([st.integers(0, 2**40)] * 5))


def messages(ids: st.SearchStrategy[str]) -> st.SearchStrategy[Message]:
    users = st.builds(
        UserMessage,
        ids,
        st.lists(text_parts | image_parts, max_size=3).map(tuple),
        _ts,
        _opt_text,
    )
    assistants = st.builds(
        AssistantMessage,
        ids,
        st.lists(text_parts | thinking_parts | call_parts, max_size=3).map(tuple),
        _ts,
        api=_text,
        provider=_text,
        model=_text,
        usage=usages,
        stop_reason=_opt_text,
        error_message=_opt_text,
    )
    results = st.builds(
        ToolResultMessage,
        ids,
        _text,
        _text,
        st.lists(text_parts | image_parts, max_size=3).map(tuple),
        st.booleans(),
        _ts,
    )
    return users | assistants | results
