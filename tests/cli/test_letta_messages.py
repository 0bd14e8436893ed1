"""Stored messages in Letta's message shape (`tether messages list --format letta`)."""

from __future__ import annotations

from tether.protocol.letta_messages import letta_messages
from tether.protocol.messages import (
    AssistantMessage,
    ImagePart,
    TextPart,
    ThinkingPart,
    ToolResultMessage,
    UserMessage,
)
from tether.protocol.tool_calls import ToolCall


def test_a_tool_turn_in_letta_shape() -> None:
    messages = [
        UserMessage("ui-msg-1", (TextPart("list files"),), 1_700_000_000_000, otid="o-1"),
        AssistantMessage("letta-msg-2", (ThinkingPart("ls will do"), TextPart("Listing."),
                                         ToolCall("call-1", "Bash", {"command": "ls"})), 1_700_000_001_000),
        ToolResultMessage("letta-msg-3", "call-1", "Bash", (TextPart("a.txt"),), False, 1_700_000_002_000),
        ToolResultMessage("letta-msg-4", "call-2", "Read", (TextPart("no such file"),), True, 1_700_000_003_000),
    ]
    out = letta_messages(messages)
    assert [m["message_type"] for m in out] == [
        "user_message", "reasoning_message", "assistant_message", "tool_call_message",
        "tool_return_message", "tool_return_message",
    ]
    assert out[0] == {"message_type": "user_message", "id": "ui-msg-1", "date": "2023-11-14T22:13:20Z",
                      "content": "list files", "otid": "o-1"}
    assert [m["id"] for m in out[1:4]] == ["letta-msg-2", "letta-msg-2-1", "letta-msg-2-2"]
    assert out[3]["tool_call"] == {"name": "Bash", "tool_call_id": "call-1", "arguments": '{"command":"ls"}'}
    assert (out[4]["tool_return"], out[4]["status"]) == ("a.txt", "success")
    assert out[5]["status"] == "error"


def test_user_images_become_typed_parts() -> None:
    out = letta_messages([UserMessage("u", (TextPart("what is this"), ImagePart("QUJD", "image/png")), 0)])
    assert out[0]["content"] == [
        {"type": "text", "text": "what is this"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "QUJD"}},
    ]
