"""`remove_queue_item` (reference §12.3): take a waiting input out of a runtime this connection
started (its sender is told it did not run, and it is recorded cancelled on disk)."""

from __future__ import annotations

from typing import Any

from tether.errors import UsageError
from tether.server.protocol_v2 import RuntimeScope
from tether.server.request_kit import Call, Request, Scope, request


def remove_queue_item(call: Call) -> dict[str, Any]:
    scope = RuntimeScope(*call.read.runtime())
    rt = call.conn.runtimes.get(scope)
    if rt is None:
        raise UsageError(f"runtime {scope.agent_id}/{scope.conversation_id} is not started on "
                         "this connection; send runtime_start first")
    item_id = call.text("item_id")
    if not rt.withdraw(item_id, "removed from the queue by a client"):
        raise UsageError(f"item_id {item_id!r} is not waiting in this runtime's queue")
    return {"item_id": item_id}


FAMILY: dict[str, Request] = {
    "remove_queue_item": request("runtime item_id", remove_queue_item, Scope.OWN,
                                 echo=("item_id",)),
}
