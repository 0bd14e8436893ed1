"""The model, toolset and provider requests (reference §12.3: `list_models`,
`list_connect_providers`, `connect_provider`, `disconnect_provider`, `update_model`,
`update_toolset`) over `runtime/manage/models_ops` and `toolset_ops`; provider records are
tether-wide, so listing or changing them needs an unscoped token, and no answer ever carries a
key. A conversation's toolset is its own: a token that reaches the conversation may change it."""

from __future__ import annotations

from typing import Any

from tether.errors import UsageError
from tether.runtime.manage import models_ops
from tether.server.request_kit import Call, Request, Scope, request


def list_models(call: Call) -> dict[str, Any]:
    return models_ops.list_models(call.home, call.env)


def list_connect_providers(call: Call) -> dict[str, Any]:
    target = call.opt_text("target") or "local"
    if target != "local":
        raise UsageError(f"target must be 'local' (this server keeps providers locally), "
                         f"not {target!r}")
    return {"target": target, "providers": models_ops.list_providers(call.home, call.env)}


def _target(call: Call) -> str:
    target = call.opt_text("target") or "local"
    if target != "local":
        raise UsageError(f"target must be 'local' (this server keeps providers locally), "
                         f"not {target!r}")
    return target


def connect_provider(call: Call) -> dict[str, Any]:
    target = _target(call)
    fields = call.frame.msg.get("fields") or {}
    if not isinstance(fields, dict):
        raise call.read.fail("fields", "must be an object of field id -> string")
    method = call.opt_text("auth_method_id")
    if method not in (None, "api", "api_key"):
        raise UsageError(f"auth_method_id {method!r}: this server connects providers by API "
                         "key or base URL only (no OAuth)")
    providers = models_ops.connect_provider(call.home, call.env, call.text("provider_id"), fields)
    return {"target": target, "providers": providers, "models_may_have_changed": True}


def disconnect_provider(call: Call) -> dict[str, Any]:
    target = _target(call)
    name = call.opt_text("provider_name") or call.text("provider_id")
    providers = models_ops.disconnect_provider(call.home, call.env, name)
    return {"target": target, "providers": providers, "models_may_have_changed": True}


def update_model(call: Call) -> dict[str, Any]:
    """The agent's model, for its next turns: saved on the agent and its idle runtimes here
    rebuilt with it; refused while one of them runs a turn (nothing is changed then)."""
    from tether.runtime.manage import agents
    from tether.server.protocol_v2 import RuntimeScope
    from tether.server.requests_agents import check_model

    scope = RuntimeScope(*call.read.runtime())
    conversation = call.conversation(scope.conversation_id, scope.agent_id)
    agent = call.agent(scope.agent_id, change=True)
    payload = call.obj("payload")
    unknown = sorted(set(payload) - {"model_id", "model_handle"})
    if unknown:
        raise call.read.fail(f"payload.{unknown[0]}", "is not a field (model_id, model_handle)")
    handle = payload.get("model_handle") or payload.get("model_id")
    if not isinstance(handle, str) or "/" not in handle:
        raise UsageError("payload.model_handle must be a handle like anthropic/claude-sonnet-4-5 "
                         "(this server has no model ids of its own: model_id must be a handle)")
    if conversation.model:
        raise UsageError(f"conversation {conversation.id} has its own model "
                         f"({conversation.model}); this server changes agents' models only")
    check_model(call, handle)
    running = [rt for s, rt in call.server.runtimes.items() if s.agent_id == agent.id]
    if any(rt.busy for rt in running):
        raise UsageError(f"agent {agent.id} is running a turn; change its model when it ends")
    updated = agents.update_agent(call.store, agent.id, {"model": handle})
    for rt in running:
        rt.reload_agent()
    call.notify("agent_updated", agent_id=agent.id, agent=updated)
    return {"runtime": scope.to_dict(), "applied_to": "agent", "model_id": handle,
            "model_handle": handle, "model_settings": updated.get("model_settings") or None}


def update_toolset(call: Call) -> dict[str, Any]:
    """The conversation's toolset preference, kept on its agent (`toolset_ops`); this server's
    runtime of the conversation is rebuilt with it, so its next turn offers those tools.
    Refused while that runtime runs a turn (nothing is changed then)."""
    from tether.runtime.manage import toolset_ops
    from tether.server.protocol_v2 import RuntimeScope
    from tether.tools.toolsets import resolve_toolset

    scope = RuntimeScope(*call.read.runtime())
    conversation = call.conversation(scope.conversation_id, scope.agent_id)
    scope = RuntimeScope(conversation.agent_id, scope.conversation_id)
    running = call.server.runtimes.get(scope)
    if running is not None and running.busy:
        raise UsageError(f"conversation {conversation.id} is running a turn; change its "
                         "toolset when it ends")
    chosen = call.frame.msg.get("toolset_preference")
    if chosen is None:
        raise call.read.fail("toolset_preference", "is required")
    current = toolset_ops.set_preference(call.server.ctx.store, scope.agent_id, scope.conversation_id, chosen)
    if running is not None:
        running.reload_agent()  # built again: the preference is read by build_prepared
        current["current_toolset"] = resolve_toolset(chosen, running.p.session.model)
    return {"runtime": scope.to_dict(), **current}


FAMILY: dict[str, Request] = {
    "update_model": request("runtime payload", update_model, Scope.OWN),
    "update_toolset": request("runtime toolset_preference", update_toolset, Scope.OWN),
    "list_models": request("", list_models, Scope.OPEN, {"entries": []}, blocking=True),
    # Credentials are tether-wide: the server's operator only; no answer carries a key.
    "connect_provider": request(
        "target provider_id auth_method_id fields", connect_provider, Scope.UNSCOPED,
        {"target": "local", "providers": [], "models_may_have_changed": False}, blocking=True,
    ),
    "disconnect_provider": request(
        "target provider_id provider_name", disconnect_provider, Scope.UNSCOPED,
        {"target": "local", "providers": [], "models_may_have_changed": False}, blocking=True,
    ),
    "list_connect_providers": request(
        "target", list_connect_providers, Scope.UNSCOPED, {"target": "local", "providers": []}
    ),
}
