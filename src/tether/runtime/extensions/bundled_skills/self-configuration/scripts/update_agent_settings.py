"""Show or change an agent's (or a conversation's) own settings: name, description, system
prompt, model, model settings, context window, compaction settings (reference §17.1).

Local agents are changed in the local store under TETHER_HOME (the next turn uses the new
record); with a base URL (`--base-url`, TETHER_BASE_URL or LETTA_BASE_URL) the agent is read and
patched over HTTP on an App Server or Letta-compatible API (`GET/PATCH /v1/agents/<id>`, Bearer
TETHER_API_KEY or LETTA_API_KEY). Output is JSON with secrets redacted. Exit 2: bad usage;
1: the change could not be made.

Run it with the Python that runs tether: `"${TETHER_PYTHON:-python3}" update_agent_settings.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, NoReturn

SAFE_FIELDS = (
    "id",
    "name",
    "description",
    "model",
    "context_window_limit",
    "agent_id",
    "llm_config",
    "model_settings",
    "compaction_settings",
)
_SECRET = re.compile(
    r"api[-_]?key|access[-_]?key|secret|token(?!s)|credential|password|authorization", re.I
)


class Usage(Exception):
    pass


class Failed(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise Usage(message)


def parser() -> _Parser:
    p = _Parser(prog="update_agent_settings.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--target", choices=("agent", "conversation"), required=True)
    p.add_argument("--agent-id", help="default: $AGENT_ID / $TETHER_AGENT_ID (this agent)")
    p.add_argument("--conversation-id", help="default: $CONVERSATION_ID / $TETHER_CONVERSATION_ID")
    p.add_argument("--base-url", help="a server to patch instead of the local store")
    p.add_argument("--name")
    p.add_argument("--description")
    p.add_argument("--system-file", help="a file holding the new system prompt (replaces it)")
    p.add_argument("--confirm-system-replacement", action="store_true")
    p.add_argument("--model", help="a model handle, e.g. anthropic/claude-sonnet-4-5")
    p.add_argument("--context-window-limit", help="a positive integer, or null to clear it")
    p.add_argument("--model-settings-file", help="a JSON object file")
    p.add_argument("--merge-model-settings", action="store_true")
    p.add_argument("--compaction-settings-file", help="a JSON object file (agent only)")
    p.add_argument("--merge-compaction-settings", action="store_true")
    p.add_argument("--allow-other-agent", action="store_true")
    p.add_argument("--show", action="store_true", help="print the current settings, change nothing")
    p.add_argument("--dry-run", action="store_true", help="print the patch, change nothing")
    return p


def main(argv: list[str] | None = None) -> int:
    env = dict(os.environ)
    try:
        ns = parser().parse_args(argv)
        request = build_request(ns, env)
        print(json.dumps(run(request, ns, env), indent=2, sort_keys=True))
        return 0
    except Usage as exc:
        sys.stderr.write(f"Usage error: {exc}\n")
        return 2
    except Failed as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1


# --- checking what was asked ---------------------------------------------------------------------


def build_request(ns: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    """The target, its ids and the partial patch, after every guard."""
    own_agent = env.get("AGENT_ID") or env.get("TETHER_AGENT_ID")
    agent_id = ns.agent_id or own_agent
    if not agent_id:
        raise Usage(
            "name the agent with --agent-id (or run inside an agent, where AGENT_ID is set)"
        )
    if ns.agent_id and own_agent:
        if ns.agent_id != own_agent and not ns.allow_other_agent:
            raise Usage(
                f"--agent-id {ns.agent_id} is not this agent ({own_agent}); pass "
                "--allow-other-agent to change another agent"
            )
        if ns.agent_id == own_agent and ns.allow_other_agent:
            raise Usage("--allow-other-agent is only for another agent; this is your own")
    elif ns.allow_other_agent and not own_agent:
        raise Usage("--allow-other-agent is only needed when AGENT_ID names a different agent")
    conversation_id = None
    if ns.target == "conversation":
        conversation_id = (
            ns.conversation_id or env.get("CONVERSATION_ID") or env.get("TETHER_CONVERSATION_ID")
        )
        if not conversation_id:
            raise Usage("--target conversation needs --conversation-id (or CONVERSATION_ID)")
        agent_only = {
            "--name": ns.name,
            "--description": ns.description,
            "--system-file": ns.system_file,
            "--compaction-settings-file": ns.compaction_settings_file,
        }
        for flag, value in agent_only.items():
            if value is not None:
                raise Usage(f"{flag} applies to --target agent only")
    if ns.merge_model_settings and ns.model_settings_file is None:
        raise Usage("--merge-model-settings needs --model-settings-file")
    if ns.merge_compaction_settings and ns.compaction_settings_file is None:
        raise Usage("--merge-compaction-settings needs --compaction-settings-file")
    if ns.confirm_system_replacement and ns.system_file is None:
        raise Usage("--confirm-system-replacement goes with --system-file")
    if ns.system_file is not None and not ns.dry_run and not ns.confirm_system_replacement:
        raise Usage(
            "--system-file replaces the whole system prompt: preview with --dry-run, then repeat "
            "with --confirm-system-replacement"
        )
    patch: dict[str, Any] = {}
    for key in ("name", "description", "model"):
        value = getattr(ns, key)
        if value is not None:
            if not value.strip() and key != "description":
                raise Usage(f"--{key} must not be empty")
            patch[key] = value
    if ns.system_file is not None:
        text = _read(ns.system_file, "--system-file")
        if not text.strip():
            raise Usage(f"--system-file {ns.system_file} is empty: refusing to blank the prompt")
        patch["system"] = text
    if ns.model_settings_file is not None:
        patch["model_settings"] = _json_object(ns.model_settings_file, "--model-settings-file")
    if ns.compaction_settings_file is not None:
        patch["compaction_settings"] = _json_object(
            ns.compaction_settings_file, "--compaction-settings-file"
        )
    if ns.context_window_limit is not None:
        raw = ns.context_window_limit.strip()
        if raw == "null":
            patch["context_window_limit"] = None
        elif raw.isdigit() and int(raw) > 0:
            patch["context_window_limit"] = int(raw)
        else:
            raise Usage(f"--context-window-limit {raw!r}: a positive integer or null")
    if ns.show:
        if patch or ns.dry_run or ns.merge_model_settings or ns.merge_compaction_settings:
            raise Usage("--show only prints the settings: give it no change and no --dry-run")
    elif not patch:
        raise Usage(
            "nothing to change: give --name, --description, --system-file, --model, "
            "--context-window-limit, --model-settings-file or --compaction-settings-file"
        )
    base_url = ns.base_url or env.get("TETHER_BASE_URL") or env.get("LETTA_BASE_URL")
    return {
        "target": ns.target,
        "agent_id": agent_id,
        "conversation_id": conversation_id,
        "patch": patch,
        "base_url": base_url.rstrip("/") if base_url else None,
    }


def _read(path: str, flag: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise Usage(f"{flag} {path}: cannot read it ({exc})") from None


def _json_object(path: str, flag: str) -> dict[str, Any]:
    try:
        value = json.loads(_read(path, flag))
    except json.JSONDecodeError as exc:
        raise Usage(f"{flag} {path}: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise Usage(f"{flag} {path}: must hold a JSON object, not {type(value).__name__}")
    return value


# --- applying it -------------------------------------------------------------------------------


def effective_patch(
    current: dict[str, Any], patch: dict[str, Any], ns: argparse.Namespace, *, local: bool
) -> dict[str, Any]:
    """The patch as it will land: merged settings objects; locally the context window lives in
    model_settings.context_window_limit (where the runtime reads it)."""
    out = dict(patch)
    if "model_settings" in patch and ns.merge_model_settings:
        out["model_settings"] = {**(current.get("model_settings") or {}), **patch["model_settings"]}
    if "compaction_settings" in patch and ns.merge_compaction_settings:
        out["compaction_settings"] = {
            **(current.get("compaction_settings") or {}),
            **patch["compaction_settings"],
        }
    if local and "context_window_limit" in out:
        limit = out.pop("context_window_limit")
        settings = dict(out.get("model_settings", current.get("model_settings") or {}))
        settings.pop("context_window_limit", None)
        if limit is not None:
            settings["context_window_limit"] = limit
        out["model_settings"] = settings
    return out


def run(request: dict[str, Any], ns: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    local = request["base_url"] is None
    target = LocalTarget(request, env) if local else RemoteTarget(request, env)
    current = target.read()
    if ns.show:
        return safe(current)
    merged = effective_patch(current, request["patch"], ns, local=local)
    if ns.dry_run:
        return {
            "target": request["target"],
            "id": target.id,
            "preview": safe({**current, **merged}),
            "patch": redact(merged),
        }
    return safe(target.write(merged))


class LocalTarget:
    def __init__(self, request: dict[str, Any], env: dict[str, str]) -> None:
        _import_tether()
        from tether.backends.local.store import LocalStore
        from tether.runtime.session.session import tether_home

        self.store = LocalStore(tether_home(env))
        self.request = request
        self.id = request["conversation_id"] or request["agent_id"]

    def read(self) -> dict[str, Any]:
        from tether.errors import TetherError

        try:
            agent = self.store.get_agent(self.request["agent_id"])
            if self.request["target"] == "agent":
                return agent.to_dict()
            record = self.store.get_conversation(self.request["conversation_id"], agent.id)
            return {**record.to_dict(), "model": record.model or agent.model}
        except TetherError as exc:
            raise Failed(str(exc)) from None

    def write(self, patch: dict[str, Any]) -> dict[str, Any]:
        import dataclasses

        from tether.backends.local.records import utc_now_iso

        agent = self.store.get_agent(self.request["agent_id"])
        if self.request["target"] == "agent":
            fields = {
                k: patch[k]
                for k in ("name", "description", "system", "model", "model_settings")
                if k in patch
            }
            extra = dict(agent.extra)
            if "compaction_settings" in patch:
                _check_compaction(patch["compaction_settings"], agent.id)
                extra["compaction_settings"] = patch["compaction_settings"]
            updated = dataclasses.replace(agent, **fields, extra=extra, updated_at=utc_now_iso())
            self.store.save_agent(updated)
            return updated.to_dict()
        record = self.store.get_conversation(self.request["conversation_id"], agent.id)
        fields = {k: patch[k] for k in ("model", "model_settings") if k in patch}
        conv = dataclasses.replace(record, **fields, updated_at=utc_now_iso())
        self.store.save_conversation(conv)
        return conv.to_dict()


def _check_compaction(settings: dict[str, Any], agent_id: str) -> None:
    from tether.backends.local.compaction import CompactionSettings
    from tether.errors import TetherError

    try:
        CompactionSettings.from_dict(settings, f"agent {agent_id}")
    except TetherError as exc:
        raise Failed(str(exc)) from None


class RemoteTarget:
    def __init__(self, request: dict[str, Any], env: dict[str, str]) -> None:
        key = env.get("TETHER_API_KEY") or env.get("LETTA_API_KEY")
        if not key:
            raise Usage("a server operation needs an API key in TETHER_API_KEY or LETTA_API_KEY")
        self.key = key
        kind = "agents" if request["target"] == "agent" else "conversations"
        self.id = request["agent_id"] if kind == "agents" else request["conversation_id"]
        self.url = f"{request['base_url']}/v1/{kind}/{self.id}"

    def read(self) -> dict[str, Any]:
        return self._call("GET", None)

    def write(self, patch: dict[str, Any]) -> dict[str, Any]:
        return self._call("PATCH", patch)

    def _call(self, method: str, body: dict[str, Any] | None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url,
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.key}",
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                answer = json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:500].decode("utf-8", "replace")
            raise Failed(f"{method} {self.url}: HTTP {exc.code} {detail}") from None
        except (urllib.error.URLError, OSError, json.JSONDecodeError) as exc:
            raise Failed(f"{method} {self.url}: {exc}") from None
        if not isinstance(answer, dict):
            raise Failed(f"{method} {self.url}: the answer is not a JSON object")
        return answer


def _import_tether() -> None:
    """Make `tether` importable when this file runs from an installed or source tree."""
    try:
        import tether  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
        try:
            import tether  # noqa: F401
        except ImportError:
            raise Failed(
                "cannot import tether: run this script with the Python that runs tether "
                '("${TETHER_PYTHON:-python3}" …)'
            ) from None


# --- output ------------------------------------------------------------------------------------


def redact(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: "[redacted]" if _SECRET.search(str(k)) else redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def safe(record: dict[str, Any]) -> dict[str, Any]:
    """Only the settings fields, secrets redacted (never the whole record: it may hold keys)."""
    out = {k: record[k] for k in SAFE_FIELDS if k in record}
    settings = record.get("model_settings") or {}
    if "context_window_limit" not in out and "context_window_limit" in settings:
        out["context_window_limit"] = settings["context_window_limit"]
    if "llm_config" in out:
        llm = out["llm_config"] if isinstance(out["llm_config"], dict) else {}
        out["llm_config"] = {"context_window": llm.get("context_window")}
    if "system" in record:
        out["system_chars"] = len(record["system"] or "")
    return redact(out)


if __name__ == "__main__":
    sys.exit(main())
