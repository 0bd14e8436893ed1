"""Agents' secrets for a client of the App Server (`secret_list`, `secret_apply`): per agent, a
name -> value map kept by the store (`ConversationStore.secrets`: `$TETHER_HOME/secrets.json`,
0600, or its row on the PostgreSQL store; written whole and atomically, so two clients'
batches never interleave). Names are upper-case environment-variable
names; values are kept as given and never logged.

A tool call's environment (`secret_env`, read per call, so a `secret_apply` reaches the next
call) carries the agent's secrets as variables, as the reference gives its shell tools the
secrets a command names (`$NAME`), so a command uses `$GITHUB_TOKEN` without the value ever
being in its text; `SECRET_NAMES_ENV` lists them, and the shell tools scrub their values from
what the model sees (`tools.output.secret_values`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import orjson

from tether.errors import StoreError, UsageError

if TYPE_CHECKING:
    from tether.backends.store_api import ConversationStore

FILE = "secrets.json"
SECRET_NAMES_ENV = "TETHER_SECRET_NAMES"  # the names a call's environment got as secrets
_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,127}$")


def list_secrets(store: ConversationStore, agent_id: str) -> list[dict[str, str]]:
    """The agent's secrets, sorted by name, as `{key, value}`."""
    held = _secrets(store).get(agent_id, {})
    return [{"key": name, "value": held[name]} for name in sorted(held)]


def apply_secrets(
    store: ConversationStore, agent_id: str, set_: Mapping[str, Any], unset: Iterable[Any]
) -> list[str]:
    """(current ∪ set) ∖ unset for the agent, in one write; its secret names after, sorted.
    A name in both lists is removed (the reference's rule)."""
    changes = {_name(key): value for key, value in set_.items()}
    for key, value in changes.items():
        if not isinstance(value, str):
            raise UsageError(f"set.{key} must be a string value")
    gone = {_name(key) for key in unset}

    def change(held: dict[str, str]) -> dict[str, str]:
        held = {**held, **changes}
        for key in gone:
            held.pop(key, None)
        return held

    return sorted(_update(store, agent_id, change))


def secret_env(store: ConversationStore, agent_id: str) -> dict[str, str]:
    """The agent's secrets as a tool call's environment variables, with `SECRET_NAMES_ENV`
    naming them; empty when it has none."""
    held = _secrets(store).get(agent_id, {})
    env = {name: value for name, value in held.items()
           if isinstance(value, str) and _NAME.match(name)}
    if env:
        env[SECRET_NAMES_ENV] = ",".join(sorted(env))
    return env


def forget_agent(store: ConversationStore, agent_id: str) -> None:
    """Drop a deleted agent's secrets."""
    if agent_id in _secrets(store):
        _update(store, agent_id, lambda _held: {})


def _secrets(store: ConversationStore) -> dict[str, dict[str, str]]:
    return _parse(store, store.read_document(FILE))


def _update(
    store: ConversationStore, agent_id: str, change: Callable[[dict[str, str]], dict[str, str]]
) -> dict[str, str]:
    """The agent's secrets replaced by `change(current)` in one atomic write of the document."""
    after: dict[str, str] = {}

    def rewrite(raw: bytes | None) -> bytes:
        nonlocal after
        everything = _parse(store, raw)
        after = change(dict(everything.get(agent_id, {})))
        if after:
            everything[agent_id] = after
        else:
            everything.pop(agent_id, None)
        return orjson.dumps(everything, option=orjson.OPT_INDENT_2) + b"\n"

    store.update_document(FILE, rewrite)
    return after


def _parse(store: ConversationStore, raw: bytes | None) -> dict[str, dict[str, str]]:
    if raw is None:
        return {}
    where = f"{FILE} in {store.home}"
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise StoreError(f"cannot read the secrets store {where}: {exc}") from None
    if not isinstance(data, dict):
        raise StoreError(f"the secrets store {where} is not a JSON object")
    return {str(k): dict(v) for k, v in data.items() if isinstance(v, dict)}


def _name(raw: Any) -> str:
    if not isinstance(raw, str):
        raise UsageError(f"secret names must be strings, got {raw!r}")
    name = raw.strip().upper()
    if not _NAME.match(name):
        raise UsageError(f"secret name {raw!r} must be letters, digits and _ (not starting with "
                         "a digit), like GITHUB_TOKEN")
    return name
