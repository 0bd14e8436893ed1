"""The conversation requests beyond CRUD (reference §12.3): `conversation_messages_list`, a
conversation's messages in Letta's shape (`message_type` user_message, assistant_message, …)
as `tether messages list --format letta` prints them, for clients hydrating a transcript."""

from __future__ import annotations

from typing import Any

from tether.errors import UsageError
from tether.runtime.manage import conversations
from tether.server.request_kit import Call, Request, Scope, request

MESSAGES_QUERY = ("limit", "order", "before", "after")


def conversation_messages_list(call: Call) -> dict[str, Any]:
    record = call.conversation(call.text("conversation_id"), call.opt_text("agent_id"))
    query = call.obj("query")
    unknown = sorted(set(query) - set(MESSAGES_QUERY))
    if unknown:
        raise UsageError(
            f"query.{unknown[0]} is not supported here (known: {', '.join(MESSAGES_QUERY)})"
        )
    limit = query.get("limit", 50)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
        raise UsageError(f"query.limit must be a whole number from 1 to 10000, got {limit!r}")
    cursors: dict[str, str | None] = {}
    for name in ("before", "after"):
        value = query.get(name)
        if value is not None and not isinstance(value, str):
            raise UsageError(f"query.{name} must be a message id string")
        cursors[name] = value
    order = query.get("order", "asc")
    if not isinstance(order, str):
        raise UsageError("query.order must be asc or desc")
    messages = conversations.letta_message_page(
        call.home, record, limit=limit, order=order, **cursors
    )
    return {"messages": messages}


FAMILY: dict[str, Request] = {
    "conversation_messages_list": request(
        "conversation_id agent_id query", conversation_messages_list, Scope.OWN,
        {"messages": []}, blocking=True,
    ),
}
