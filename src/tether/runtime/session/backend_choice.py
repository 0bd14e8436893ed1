"""Which backend a run uses (`--backend local|cloud|api`, the saved default from `tether backend`),
where the Letta server is (LETTA_BASE_URL / LETTA_API_KEY, or `tether connect letta`), and the
hosted session and backend for a cloud run (`build_backend`).

Order: `--backend` → `TETHER_BACKEND` (what a parent run or a wrapper hands its children) → the
saved default (`$TETHER_HOME/state/backend.json`) → local. tether's
default is local (DESIGN §1: no server needed); `api` is an alias of `cloud`, as in the
reference. Headless cloud against Letta Cloud itself without a key is the reference's error.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import orjson

from tether.errors import UsageError

if TYPE_CHECKING:
    from tether.backends.api.backend import ApiBackend
    from tether.runtime.session.flags import RunFlags
    from tether.runtime.session.session import Session

Mode = Literal["local", "cloud"]
BACKEND_VALUES: dict[str, Mode] = {"local": "local", "cloud": "cloud", "api": "cloud"}
LETTA_CLOUD_URL = "https://api.letta.com"
# The reference's words (src/index.ts), for a headless run against Letta Cloud with no key.
MISSING_KEY = (
    "Missing LETTA_API_KEY\n"
    "Headless mode requires an API key set via the LETTA_API_KEY environment variable.\n"
    "Get an API key at https://app.letta.com/api-keys"
)


@dataclass(frozen=True, slots=True)
class LettaServer:
    base_url: str
    api_key: str | None


def parse_backend(value: str, where: str = "--backend") -> Mode:
    mode = BACKEND_VALUES.get(value.strip().lower())
    if mode is None:
        raise UsageError(f"{where} {value!r} is not valid; choose one of: local, cloud (or api)")
    return mode


def _state_path(home: Path) -> Path:
    return home / "state" / "backend.json"


def saved_backend(home: Path) -> Mode | None:
    """The default saved by `tether backend local|cloud`, or None when none was saved."""
    path = _state_path(home)
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except orjson.JSONDecodeError:
        raise UsageError(f"{path} is not valid JSON; fix it or run `tether backend local|cloud`") from None
    value = data.get("preferredBackendMode") if isinstance(data, dict) else None
    if not isinstance(value, str):
        return None
    return parse_backend(value, f"{path}: preferredBackendMode")


def save_backend(home: Path, mode: Mode) -> Path:
    """Save the default; stored as the reference's `preferredBackendMode` (`api` | `local`)."""
    path = _state_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(orjson.dumps({"preferredBackendMode": "api" if mode == "cloud" else "local"}))
    os.replace(tmp, path)
    return path


def choose_backend(flag: str | None, home: Path, env: Mapping[str, str] | None = None) -> Mode:
    if flag is not None:
        return parse_backend(flag)
    if env is not None and env.get("TETHER_BACKEND"):
        return parse_backend(env["TETHER_BACKEND"], "TETHER_BACKEND")
    return saved_backend(home) or "local"


def letta_server(env: Mapping[str, str], home: Path) -> LettaServer:
    """LETTA_BASE_URL / LETTA_API_KEY, else what `tether connect letta` stored, else Letta Cloud."""
    from tether.providers.credentials import letta_credential

    stored_url, stored_key = letta_credential(home)
    base_url = env.get("LETTA_BASE_URL") or stored_url or LETTA_CLOUD_URL
    api_key = env.get("LETTA_API_KEY") or stored_key
    return LettaServer(base_url.rstrip("/"), api_key or None)


def check_key(server: LettaServer, *, headless: bool, env: Mapping[str, str]) -> None:
    """The reference refuses a headless run against Letta Cloud without LETTA_API_KEY in the
    environment (a stored interactive login is not accepted for automation)."""
    if headless and server.base_url == LETTA_CLOUD_URL and not env.get("LETTA_API_KEY"):
        raise UsageError(MISSING_KEY)


def build_backend(
    flags: RunFlags, env: Mapping[str, str], home: Path, cwd: Path, system: str | None = None
) -> tuple[Session, ApiBackend] | None:
    """The session and backend of a cloud run, resolved on the server; None for a local run
    (the runner then builds the local session and LocalBackend as before)."""
    if choose_backend(flags.backend, home, env) != "cloud":
        return None
    import asyncio

    from tether.backends.api.agents import resolve_server_session
    from tether.backends.api.backend import ApiBackend
    from tether.backends.api.client import LettaClient
    from tether.runtime.session.session import Session

    server = letta_server(env, home)
    check_key(server, headless=flags.headless, env=env)
    client = LettaClient(server.base_url, server.api_key, env=env)
    hosted = asyncio.run(resolve_server_session(
        client, agent_id=flags.agent, new_agent=flags.new_agent, conversation=flags.conversation,
        new_conversation=flags.new_conversation, model=flags.model, system=system,
        tags=flags.tags, remember=home / "state" / "last-server-agents.json", cwd=cwd,
    ))
    from tether.backends.api.agents import agent_model

    override = flags.model if flags.model and flags.model != agent_model(hosted.agent) else None
    backend = ApiBackend(client, stash_dir=home / "state" / "server-answers",
                         override_model=override)
    record = agent_record(hosted.agent, hosted.model)
    mirror_locally(home, record, hosted.conversation_id)
    session = Session(record, hosted.conversation_id, hosted.model, hosted.created_agent)
    return session, backend


def mirror_locally(home: Path, agent: Any, conversation_id: str) -> None:
    """Local records under the server's ids: every frontend takes the same cross-process turn
    lock and keeps its effect checkpoints for a hosted conversation as for a local one. The
    history itself stays on the server (the local transcript of a mirror stays empty)."""
    from tether.backends.local.records import ConversationRecord, utc_now_iso
    from tether.backends.local.store import LocalStore
    from tether.errors import NotFound

    store = LocalStore(home)
    store.save_agent(agent)
    if conversation_id == "default":
        return
    try:
        store.get_conversation(conversation_id, agent.id)
    except NotFound:
        now = utc_now_iso()
        store.save_conversation(ConversationRecord(
            id=conversation_id, agent_id=agent.id, archived=False, archived_at=None,
            created_at=now, updated_at=now, last_message_at=None, summary=None,
            in_context_message_ids=(), model_settings={"backend": "cloud"},
        ))


def agent_record(agent: Mapping[str, Any], model: str) -> Any:
    """The server's AgentState as tether's agent record (what frontends show and key state by)."""
    from tether.backends.local.records import AgentRecord, utc_now_iso

    def text(key: str) -> str:
        value = agent.get(key)
        return value if isinstance(value, str) else ""

    tags = agent.get("tags")
    return AgentRecord(
        id=text("id"), name=text("name"), description=text("description"), system=text("system"),
        tags=tuple(t for t in tags if isinstance(t, str)) if isinstance(tags, list) else (),
        model=model, model_settings={}, created_at=text("created_at") or utc_now_iso(),
        updated_at=text("updated_at") or utc_now_iso(),
        extra={"backend": "cloud", "agent_type": agent.get("agent_type")},
    )
