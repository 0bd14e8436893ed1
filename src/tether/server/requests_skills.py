"""The skill requests (reference §12.3: `skill_enable`, `skill_disable`, plus tether's
`skill_list`) over `runtime/manage/skills_ops`, as `tether skills` does. Installing reads a
folder (or clones a repository) on the server's machine, so it needs an unscoped token; with
`agent_id` a skill goes into (or out of) that agent's memory, else the global skills.
`skills_updated` tells the clients that may see the change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tether.errors import UsageError
from tether.runtime.manage import skills_ops
from tether.server.request_kit import Call, Request, Scope, request


def skill_list(call: Call) -> dict[str, Any]:
    from tether.server.runtime_start import folder_trusted

    agent_id = call.opt_text("agent_id")
    if agent_id is not None:
        agent_id = call.agent(agent_id).id
    cwds: list[Path] = [rt.p.cwd for rt in call.conn.runtimes.values()]
    if not call.grant.scoped:
        cwds.append(call.server.ctx.default_cwd)
    if not cwds:
        raise UsageError("this connection has no workspace yet: start a runtime first")
    cwd = cwds[0]
    rows = skills_ops.list_skills(call.store, cwd, agent_id,
                                  project_trusted=folder_trusted(call.server.ctx, cwd))
    return {"skills": rows}


def skill_enable(call: Call) -> dict[str, Any]:
    agent_id = call.opt_text("agent_id")
    if agent_id is not None:
        agent_id = call.agent(agent_id).id
    installed = skills_ops.install_skill(
        call.store, call.text("skill_path"), agent_id=agent_id, force=call.flag("force"),
    )
    _notify(call, agent_id, installed["name"])
    return {"skill_name": installed["name"], "skill": installed}


def skill_disable(call: Call) -> dict[str, Any]:
    agent_id = call.opt_text("agent_id")
    if agent_id is not None:
        agent_id = call.agent(agent_id).id
    else:
        call.require_unscoped()
    name = call.text("name")
    skills_ops.delete_skill(call.store, name, agent_id=agent_id)
    _notify(call, agent_id, name)
    return {"skill_name": name}


def _notify(call: Call, agent_id: str | None, name: str) -> None:
    if agent_id is None:
        call.notify_all("skills_updated", skill_name=name)
    else:
        call.notify("skills_updated", agent_id=agent_id, skill_name=name)
        call.notify("memory_updated", agent_id=agent_id, affected_paths=[f"skills/{name}"])


FAMILY: dict[str, Request] = {
    "skill_list": request("agent_id", skill_list, Scope.OWN, {"skills": []}, blocking=True),
    "skill_enable": request("skill_path agent_id force", skill_enable, Scope.UNSCOPED,
                            blocking=True),
    "skill_disable": request("name agent_id", skill_disable, Scope.OWN, blocking=True,
                             echo=("name>skill_name",)),
}
