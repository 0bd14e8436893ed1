"""The secret requests (reference §12.3: `secret_list`, `secret_apply`) over
`runtime/manage/secrets_ops`. `secret_list` answers plaintext values (the reference's modal
needs them), so both need an unscoped connection: a scoped client never reads or sets one. A
secret set here is in the environment of the agent's next tool call (`secrets_ops.secret_env`),
its value scrubbed from the shell tools' output."""

from __future__ import annotations

from typing import Any

from tether.errors import UsageError
from tether.runtime.manage import secrets_ops
from tether.server.request_kit import Call, Request, Scope, request


def secret_list(call: Call) -> dict[str, Any]:
    agent = call.agent(call.text("agent_id"))
    return {"secrets": secrets_ops.list_secrets(call.store, agent.id)}


def secret_apply(call: Call) -> dict[str, Any]:
    agent = call.agent(call.text("agent_id"))
    set_ = call.frame.msg.get("set") or {}
    unset = call.frame.msg.get("unset") or []
    if not isinstance(set_, dict):
        raise UsageError("set must be an object of NAME: value")
    if not isinstance(unset, list):
        raise UsageError("unset must be a list of names")
    return {"names": secrets_ops.apply_secrets(call.store, agent.id, set_, unset)}


FAMILY: dict[str, Request] = {
    "secret_list": request("agent_id", secret_list, Scope.UNSCOPED, {"secrets": []},
                           blocking=True),
    "secret_apply": request("agent_id set unset", secret_apply, Scope.UNSCOPED, {"names": []},
                            blocking=True),
}
