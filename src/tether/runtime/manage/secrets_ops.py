"""Agents' secrets for a client of the App Server (`secret_list`, `secret_apply`): per agent, a
name -> value map in `$TETHER_HOME/secrets.json` (0600, written whole and atomically under a
lock, so two clients' batches never interleave). Names are upper-case environment-variable
names; values are kept as given and never logged.

A tool call's environment (`secret_env`, read per call, so a `secret_apply` reaches the next
call) carries the agent's secrets as variables, as the reference gives its shell tools the
secrets a command names (`$NAME`), so a command uses `$GITHUB_TOKEN` without the value ever
being in its text; `SECRET_NAMES_ENV` lists them, and the shell tools scrub their values from
what the model sees (`tools.output.secret_values`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from tether.errors import StoreError, UsageError

FILE = "secrets.json"
SECRET_NAMES_ENV = "TETHER_SECRET_NAMES"  # the names a call's environment got as secrets
_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,127}$")


def list_secrets(home: Path, agent_id: str) -> list[dict[str, str]]:
    """The agent's secrets, sorted by name, as `{key, value}`."""
    held = _read(home).get(agent_id, {})
    return [{"key": name, "value": held[name]} for name in sorted(held)]


def apply_secrets(
    home: Path, agent_id: str, set_: Mapping[str, Any], unset: Iterable[Any]
) -> list[str]:
    """(current ∪ set) ∖ unset for the agent, in one write; its secret names after, sorted.
    A name in both lists is removed (the reference's rule)."""
    from tether.backends.local.locks import exclusive_flock, write_json_atomic

    changes = {_name(key): value for key, value in set_.items()}
    for key, value in changes.items():
        if not isinstance(value, str):
            raise UsageError(f"set.{key} must be a string value")
    gone = {_name(key) for key in unset}
    with exclusive_flock(home / "secrets.lock", wait=10, busy=lambda: StoreError(
            "the secrets store is busy (another writer holds secrets.lock); try again")):
        everything = _read(home)
        held = {**everything.get(agent_id, {}), **changes}
        for key in gone:
            held.pop(key, None)
        if held:
            everything[agent_id] = held
        else:
            everything.pop(agent_id, None)
        write_json_atomic(home / FILE, everything)  # created 0600
    return sorted(held)


def secret_env(home: Path, agent_id: str) -> dict[str, str]:
    """The agent's secrets as a tool call's environment variables, with `SECRET_NAMES_ENV`
    naming them; empty when it has none (no file: nothing read but a stat)."""
    if not (home / FILE).exists():
        return {}
    held = _read(home).get(agent_id, {})
    env = {name: value for name, value in held.items()
           if isinstance(value, str) and _NAME.match(name)}
    if env:
        env[SECRET_NAMES_ENV] = ",".join(sorted(env))
    return env


def forget_agent(home: Path, agent_id: str) -> None:
    """Drop a deleted agent's secrets."""
    if agent_id in _read(home):
        apply_secrets(home, agent_id, {}, list(_read(home)[agent_id]))


def _name(raw: Any) -> str:
    if not isinstance(raw, str):
        raise UsageError(f"secret names must be strings, got {raw!r}")
    name = raw.strip().upper()
    if not _NAME.match(name):
        raise UsageError(f"secret name {raw!r} must be letters, digits and _ (not starting with "
                         "a digit), like GITHUB_TOKEN")
    return name


def _read(home: Path) -> dict[str, dict[str, str]]:
    path = home / FILE
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return {}
    except (OSError, orjson.JSONDecodeError) as exc:
        raise StoreError(f"cannot read the secrets store {path}: {exc}") from None
    if not isinstance(data, dict):
        raise StoreError(f"the secrets store {path} is not a JSON object")
    return {str(k): dict(v) for k, v in data.items() if isinstance(v, dict)}
