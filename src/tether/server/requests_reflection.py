"""The reflection settings requests (reference §12.3: `get_reflection_settings`,
`set_reflection_settings`) over `runtime/manage/reflection_ops`. tether keeps one setting per
agent, wherever it runs: `scope` "global" (or omitted) is what it does; "local_project" and
"both" ask for per-project settings it does not keep, and are refused rather than half done."""

from __future__ import annotations

from typing import Any

from tether.errors import UsageError
from tether.server.request_kit import Call, Request, Scope, request


def _agent(call: Call, *, change: bool) -> str:
    agent_id, conversation_id = call.read.runtime()
    call.conversation(conversation_id, agent_id)  # granted and existing, else not found
    return call.agent(agent_id, change=change).id


def get_reflection_settings(call: Call) -> dict[str, Any]:
    from tether.runtime.manage import reflection_ops

    return {"reflection_settings": reflection_ops.get_settings(call.store, _agent(call,
                                                                                 change=False))}


def set_reflection_settings(call: Call) -> dict[str, Any]:
    from tether.runtime.manage import reflection_ops

    scope = call.opt_text("scope") or "global"
    if scope not in ("global", "local_project", "both"):
        raise UsageError(f"scope must be local_project, global or both, not {scope!r}")
    if scope != "global":
        raise UsageError(f"scope {scope!r}: this server keeps reflection settings per agent "
                         "(scope 'global'), not per project")
    agent_id = _agent(call, change=True)
    settings = call.obj("settings")
    unknown = sorted(set(settings) - {"trigger", "step_count"})
    if unknown:
        raise call.read.fail(f"settings.{unknown[0]}", "is not a field (trigger, step_count)")
    done = reflection_ops.set_settings(call.store, agent_id, settings.get("trigger"),
                                       settings.get("step_count"))
    for running, rt in call.server.runtimes.items():  # their device status shows the settings
        if running.agent_id == agent_id:
            rt.broadcast(rt.device_status_frame())
    return {"reflection_settings": done, "scope": "global"}


FAMILY: dict[str, Request] = {
    "get_reflection_settings": request("runtime", get_reflection_settings, Scope.OWN,
                                       {"reflection_settings": None}),
    "set_reflection_settings": request("runtime settings scope", set_reflection_settings,
                                       Scope.OWN, {"reflection_settings": None,
                                                   "scope": "global"}),
}
