"""Agents and conversations on a Letta server: resolve which ones a run uses, list them, and
find the tool calls the server still waits on.

Agent: `--agent ID` → `--conversation ID`'s agent → `--new-agent` → the agent this project
last used on this server → a new agent. Conversation: `--conversation default|ID` → `--new`
→ otherwise a fresh conversation every run (as on the local backend). The model of a new
agent is `--model`, else the server's first model.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tether.backends.api.client import LettaClient, LettaNotFound
from tether.errors import UsageError
from tether.protocol.turns import ConversationRef

# A new agent's embedding: the reference's choice; nothing tether does uses archival memory.
DEFAULT_EMBEDDING = "openai/text-embedding-3-small"


@dataclass(frozen=True, slots=True)
class ServerSession:
    agent: dict[str, Any]  # the server's AgentState
    conversation_id: str  # "default" = the agent's own history
    model: str
    created_agent: bool

    @property
    def ref(self) -> ConversationRef:
        return ConversationRef(str(self.agent["id"]), self.conversation_id)


async def resolve_server_session(
    client: LettaClient, *, agent_id: str | None, new_agent: bool, conversation: str | None,
    new_conversation: bool, model: str | None, system: str | None, tags: list[str],
    remember: Path | None, cwd: Path,
) -> ServerSession:
    created = False
    if conversation is not None and conversation != "default":
        conv = await get_or_explain(client, f"/v1/conversations/{conversation}", "conversation",
                                    conversation)
        agent = await get_or_explain(client, f"/v1/agents/{conv['agent_id']}", "agent",
                                     str(conv["agent_id"]))
        conversation_id = str(conv["id"])
    else:
        if agent_id is not None:
            agent = await get_or_explain(client, f"/v1/agents/{agent_id}", "agent", agent_id)
        elif not new_agent and (last := await _last_agent(client, remember, cwd)) is not None:
            agent = last
        else:
            agent = await create_agent(client, model=model, system=system, tags=tags)
            created = True
        if conversation == "default":
            conversation_id = "default"
        else:
            conv = await client.request("POST", "/v1/conversations/", {},
                                        query={"agent_id": agent["id"]})
            conversation_id = str(conv["id"])
    if remember is not None:
        _remember(remember, client.base_url, cwd, str(agent["id"]))
    handle = agent_model(agent)
    return ServerSession(agent, conversation_id, model or handle, created)


async def get_or_explain(client: LettaClient, path: str, what: str, ident: str) -> dict[str, Any]:
    try:
        found = await client.request("GET", path)
    except LettaNotFound:
        raise UsageError(f"{what} {ident} not found on the Letta server at {client.base_url}") from None
    if not isinstance(found, dict) or "id" not in found:
        raise UsageError(f"the Letta server at {client.base_url} answered GET {path} with no {what}")
    return found


async def create_agent(
    client: LettaClient, *, model: str | None, system: str | None, tags: list[str]
) -> dict[str, Any]:
    handle = model or await first_model(client)
    body: dict[str, Any] = {"name": f"tether-{os.urandom(4).hex()}", "model": handle,
                            "embedding": DEFAULT_EMBEDDING, "tags": tags,
                            "memory_blocks": [{"label": "persona",
                                               "value": "I am a coding agent driven by tether."}]}
    if system:
        body["system"] = system
    agent = await client.request("POST", "/v1/agents/", body)
    if not isinstance(agent, dict) or "id" not in agent:
        raise UsageError(f"the Letta server at {client.base_url} created no agent: {agent!r:.200}")
    return agent


async def first_model(client: LettaClient) -> str:
    models = await client.request("GET", "/v1/models/")
    handles = [m.get("handle") for m in models or [] if isinstance(m, dict)]
    usable = [h for h in handles if isinstance(h, str) and h and not h.startswith("letta/")]
    if not usable:
        raise UsageError(
            f"the Letta server at {client.base_url} lists no model; pass --model <handle> "
            "(see GET /v1/models/ on the server)"
        )
    return usable[0]


async def list_agents(client: LettaClient, limit: int = 100) -> list[dict[str, Any]]:
    found = await client.request("GET", "/v1/agents/", query={"limit": limit})
    return [a for a in found or [] if isinstance(a, dict)]


def agent_model(agent: Mapping[str, Any]) -> str:
    for key in ("model",):
        if isinstance(agent.get(key), str) and agent[key]:
            return str(agent[key])
    llm = agent.get("llm_config")
    if isinstance(llm, dict):
        if isinstance(llm.get("handle"), str) and llm["handle"]:
            return str(llm["handle"])
        if isinstance(llm.get("model"), str):
            return str(llm["model"])
    return "unknown"


async def pending_approvals(client: LettaClient, conversation: ConversationRef) -> list[str]:
    """Tool call ids the server asked approval for and never got an answer to (newest last)."""
    default = conversation.conversation_id == "default"
    messages = await client.request(
        "GET", f"/v1/conversations/{conversation.conversation_id}/messages",
        query={"order": "desc", "limit": 50, "agent_id": conversation.agent_id if default else None},
    )
    answered: set[str] = set()
    pending: list[str] = []
    for m in messages or []:  # newest first
        if not isinstance(m, dict):
            continue
        kind = m.get("message_type")
        if kind == "approval_response_message":
            for a in m.get("approvals") or []:
                if isinstance(a, dict) and isinstance(a.get("tool_call_id"), str):
                    answered.add(a["tool_call_id"])
            if isinstance(m.get("approval_request_id"), str):
                answered.add(m["approval_request_id"])
        elif kind == "tool_return_message" and isinstance(m.get("tool_call_id"), str):
            answered.add(m["tool_call_id"])
        elif kind == "approval_request_message":
            calls = m.get("tool_calls") or ([m["tool_call"]] if isinstance(m.get("tool_call"), dict) else [])
            ids = [c.get("tool_call_id") for c in calls if isinstance(c, dict)]
            pending.extend(i for i in ids if isinstance(i, str) and i not in answered and i not in pending)
            break  # only the newest request can still be open
        elif kind in ("user_message", "assistant_message"):
            break
    return pending


# --- the project's last agent on this server ---------------------------------------------


def _read(path: Path) -> dict[str, Any]:
    try:
        data = orjson.loads(path.read_bytes())
    except (FileNotFoundError, orjson.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


async def _last_agent(client: LettaClient, path: Path | None, cwd: Path) -> dict[str, Any] | None:
    if path is None:
        return None
    agent_id = _read(path).get(client.base_url, {}).get(str(cwd))
    if not isinstance(agent_id, str):
        return None
    try:
        found = await client.request("GET", f"/v1/agents/{agent_id}")
    except LettaNotFound:
        return None
    return found if isinstance(found, dict) else None


def _remember(path: Path, base_url: str, cwd: Path, agent_id: str) -> None:
    data = _read(path)
    server = data.get(base_url)
    server = server if isinstance(server, dict) else {}
    server[str(cwd)] = agent_id
    data[base_url] = server
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    os.replace(tmp, path)
