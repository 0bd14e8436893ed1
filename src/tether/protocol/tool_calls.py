"""The tool-call vocabulary: one `ToolCall` from the provider's stream to the transcript and the
checkpoint row, and one `ToolReturn` that answers it and alone builds the tool-result message.

A `ToolCall` is built once, where a model step is assembled (`ToolCall.parse`, the only place a
call's argument text is parsed from JSON), and then carried unchanged: the approval request on
the wire, the judged call, the assistant message's part, the checkpoint row. A malformed argument
text is not an exception: the call carries why (`error`) and empty `arguments`, and the model is
answered with that. A call read from a
stored transcript line is built from the arguments decoded with that line (`raw` is None).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import orjson

if TYPE_CHECKING:  # messages.py imports this module: its types are named, not imported, here
    from tether.protocol.messages import ImagePart, ToolResultMessage


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call the model proposed: its id, tool name, parsed arguments and raw text.

    `arguments` is the parsed JSON object (empty when `error` says why the text was unusable);
    `text` is the argument text exactly as the model produced it. Equality is the call's
    meaning (id, name, arguments): a call read back from a transcript equals the one written.
    """

    id: str
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    # the model's own text; None when the arguments came decoded (a transcript line)
    raw: str | None = field(default=None, compare=False)
    error: str | None = field(default=None, compare=False)  # why the text gave no arguments
    kind: Literal["toolCall"] = "toolCall"

    @property
    def text(self) -> str:
        """The argument text: the model's own, or the arguments serialised once."""
        if self.raw is not None:
            return self.raw
        return orjson.dumps(dict(self.arguments)).decode()

    @classmethod
    def parse(cls, id: str, name: str, text: str) -> ToolCall:
        """The one place a call's argument text becomes arguments."""
        if not text.strip():
            return cls(id, name, {}, text, "the arguments were empty")
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            return cls(id, name, {}, text, "the arguments were not valid JSON")
        if not isinstance(value, dict):
            return cls(id, name, {}, text, "the arguments were not a JSON object")
        return cls(id, name, value, text)


@dataclass(frozen=True, slots=True)
class ToolReturn:
    """The answer to one tool call: its result, or a denial (`denied=True`, `output` = reason).

    Every path that answers a call (executed, denied, interrupted, answered by a client or an
    MCP server, failed) produces one of these, and `to_message` alone turns it into the
    transcript's tool-result message.
    """

    tool_call_id: str
    tool_name: str
    output: str
    is_error: bool
    denied: bool = False
    stdout: tuple[str, ...] | None = None
    stderr: tuple[str, ...] | None = None
    images: tuple[ImagePart, ...] = ()  # go into the transcript's tool result beside the text

    @property
    def status(self) -> Literal["success", "error"]:
        return "error" if self.is_error else "success"

    def to_message(self, timestamp: int) -> ToolResultMessage:
        """The transcript's `toolResult` message for this answer, under a new message id."""
        from tether.protocol.messages import TextPart, ToolResultMessage

        return ToolResultMessage(
            f"letta-msg-{uuid.uuid4().hex[:16]}",
            self.tool_call_id,
            self.tool_name,
            (TextPart(self.output), *self.images),
            self.is_error,
            timestamp,
        )
