"""The channel file formats under `$TETHER_HOME/channels/`, read and written by the gateway
(`channels/`), the `tether channels` command and the App Server's channel requests alike:
`accounts.json` (one entry per configured
channel account, config redacted whenever shown), `routing.yaml` (which chat reaches which
agent and conversation) and `pairing.yaml` (codes given to unknown users, waiting for the
owner's `tether channels pair`), plus `gateway-status.json` (which accounts a running gateway
serves, so a client can be told what is running).

Writes go through a temporary file and `os.replace`, 0600, so a crash never leaves half a file
and a bot token is readable by its owner only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from tether.errors import UsageError

DM_POLICIES = ("pairing", "allowlist", "open")
GROUP_POLICIES = ("mention", "open", "disabled")
REDACTED = "[redacted]"
PAIRING_TTL = 3600.0  # seconds a pairing code stays valid
ID_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789_-")


def iso_now() -> str:
    return iso(time.time())


def iso(seconds: float) -> str:
    """A Unix time as the reference's ISO 8601 timestamps (`2026-01-02T03:04:05.678Z`)."""
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def channels_dir(home: Path) -> Path:
    return home / "channels"


def check_id(value: str, what: str = "channel id") -> str:
    if not value or not set(value) <= ID_CHARS:
        raise UsageError(f"{what} {value!r} must be non-empty and use only a-z, 0-9, _ and -")
    return value


_locks: dict[Path, threading.RLock] = {}
_depth: dict[Path, int] = {}
_fds: dict[Path, int] = {}
_registry = threading.Lock()


@contextlib.contextmanager
def locked(home: Path) -> Iterator[None]:
    """One writer at a time, across processes (the gateway, the App Server, the CLI), for a
    read-modify-write of the channel files (`channels/.lock`, flock); re-entrant in a thread."""
    path = channels_dir(home) / ".lock"
    with _registry:
        lock = _locks.setdefault(path, threading.RLock())
    with lock:
        depth = _depth.get(path, 0)
        if depth == 0:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            _fds[path] = fd
        _depth[path] = depth + 1
        try:
            yield
        finally:
            _depth[path] -= 1
            if _depth[path] == 0:
                os.close(_fds.pop(path))  # closing it releases the flock


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    import yaml

    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise UsageError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path} must hold a mapping at the top level")
    return data


def _write_yaml(path: Path, data: Mapping[str, Any]) -> None:
    import yaml

    _write(path, yaml.safe_dump(dict(data), sort_keys=False).encode())


# --- accounts.json ------------------------------------------------------------------------------


@dataclass
class Account:
    channel: str
    account_id: str = "default"
    display_name: str | None = None
    enabled: bool = True
    dm_policy: str = "pairing"
    allowed_users: list[str] = field(default_factory=list)
    admin_users: list[str] = field(default_factory=list)
    group_policy: str = "mention"
    config: dict[str, Any] = field(default_factory=dict)  # plugin-owned: tokens, URLs
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        return {
            "channel": self.channel, "accountId": self.account_id,
            "displayName": self.display_name, "enabled": self.enabled,
            "dmPolicy": self.dm_policy, "allowedUsers": self.allowed_users,
            "adminUsers": self.admin_users, "groupPolicy": self.group_policy,
            "config": self.config, "createdAt": self.created_at, "updatedAt": self.updated_at,
        }

    def redacted(self) -> dict[str, Any]:
        """What any command or response shows: every config value hidden (the plugin owns
        the config, so tether cannot know which fields are secret)."""
        shown = self.to_json()
        shown["config"] = {k: REDACTED for k in self.config}
        return shown

    @classmethod
    def from_json(cls, raw: Any, where: str) -> Account:
        if not isinstance(raw, dict):
            raise UsageError(f"{where} must be an object")
        channel = raw.get("channel")
        if not isinstance(channel, str):
            raise UsageError(f"{where}.channel must be a string")
        account = cls(check_id(channel), str(raw.get("accountId") or "default"))
        account.display_name = raw.get("displayName")
        account.enabled = bool(raw.get("enabled", True))
        account.dm_policy = str(raw.get("dmPolicy", "pairing"))
        if account.dm_policy not in DM_POLICIES:
            raise UsageError(f"{where}.dmPolicy must be one of {', '.join(DM_POLICIES)}")
        account.group_policy = str(raw.get("groupPolicy", "mention"))
        if account.group_policy not in GROUP_POLICIES:
            raise UsageError(f"{where}.groupPolicy must be one of {', '.join(GROUP_POLICIES)}")
        for key, attr in (("allowedUsers", "allowed_users"), ("adminUsers", "admin_users")):
            users = raw.get(key, [])
            if not isinstance(users, list):
                raise UsageError(f"{where}.{key} must be a list of user ids")
            setattr(account, attr, [str(u) for u in users])
        config = raw.get("config", {})
        if not isinstance(config, dict):
            raise UsageError(f"{where}.config must be an object")
        account.config = config
        account.created_at = float(raw.get("createdAt", time.time()))
        account.updated_at = float(raw.get("updatedAt", time.time()))
        return account


class AccountStore:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.path = channels_dir(home) / "accounts.json"

    def load(self) -> list[Account]:
        if not self.path.exists():
            return []
        try:
            raw = orjson.loads(self.path.read_bytes())
        except orjson.JSONDecodeError as exc:
            raise UsageError(f"{self.path} is not valid JSON: {exc}") from None
        items = raw.get("accounts") if isinstance(raw, dict) else None
        if not isinstance(items, list):
            raise UsageError(f"{self.path} must hold {{\"accounts\": [...]}}")
        return [Account.from_json(a, f"{self.path}: accounts[{i}]") for i, a in enumerate(items)]

    def save(self, accounts: list[Account]) -> None:
        body = {"accounts": [a.to_json() for a in accounts]}
        _write(self.path, orjson.dumps(body, option=orjson.OPT_INDENT_2))

    def get(self, channel: str, account_id: str = "default") -> Account | None:
        return next(
            (a for a in self.load() if a.channel == channel and a.account_id == account_id), None
        )

    def upsert(self, account: Account) -> None:
        with locked(self.home):
            accounts = [
                a for a in self.load()
                if (a.channel, a.account_id) != (account.channel, account.account_id)
            ]
            account.updated_at = time.time()
            accounts.append(account)
            self.save(accounts)


# --- routing.yaml -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    channel: str
    account_id: str
    chat_id: str  # "*": every chat of the account without a route of its own
    agent_id: str
    conversation_id: str = "default"
    cwd: str | None = None
    created_at: str | None = None  # ISO 8601, set when the route is first written
    updated_at: str | None = None

    def key(self) -> str:
        return f"{self.channel}/{self.account_id}/{self.chat_id}"

    def to_yaml(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if v is not None}
        out["account"] = out.pop("account_id")
        out["agent"] = out.pop("agent_id")
        out["conversation"] = out.pop("conversation_id")
        out["chat"] = out.pop("chat_id")
        return out


class RouteTable:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.path = channels_dir(home) / "routing.yaml"

    def load(self) -> list[Route]:
        data = _read_yaml(self.path)
        items = data.get("routes", [])
        if not isinstance(items, list):
            raise UsageError(f"{self.path}: 'routes' must be a list")
        routes = []
        for i, raw in enumerate(items):
            where = f"{self.path}: routes[{i}]"
            if not isinstance(raw, dict):
                raise UsageError(f"{where} must be a mapping")
            for need in ("channel", "chat", "agent"):
                if not isinstance(raw.get(need), str | int) or raw.get(need) == "":
                    raise UsageError(f"{where} needs '{need}'")
            cwd, made, changed = raw.get("cwd"), raw.get("created_at"), raw.get("updated_at")
            routes.append(Route(
                str(raw["channel"]), str(raw.get("account", "default")), str(raw["chat"]),
                str(raw["agent"]), str(raw.get("conversation", "default")),
                str(cwd) if cwd is not None else None,
                str(made) if made is not None else None,
                str(changed) if changed is not None else None,
            ))
        return routes

    def save(self, routes: list[Route]) -> None:
        _write_yaml(self.path, {"routes": [r.to_yaml() for r in routes]})

    def add(self, route: Route) -> Route:
        """Add or replace the route of its chat; what was written (timestamps set: a replaced
        route keeps its creation time)."""
        now = iso_now()
        with locked(self.home):
            routes = self.load()
            old = next((r for r in routes if r.key() == route.key()), None)
            made = old.created_at if old is not None and old.created_at else (
                route.created_at or now)
            route = replace(route, created_at=made, updated_at=now)
            routes = [r for r in routes if r.key() != route.key()]
            routes.append(route)
            self.save(routes)
        return route

    def remove(self, channel: str, account_id: str, chat_id: str) -> bool:
        with locked(self.home):
            routes = self.load()
            kept = [r for r in routes if (r.channel, r.account_id, r.chat_id) !=
                    (channel, account_id, chat_id)]
            if len(kept) == len(routes):
                return False
            self.save(kept)
        return True

    def lookup(self, channel: str, account_id: str, chat_id: str) -> Route | None:
        routes = self.load()
        for wanted in (chat_id, "*"):
            for r in routes:
                if (r.channel, r.account_id, r.chat_id) == (channel, account_id, wanted):
                    return r
        return None


# --- pairing.yaml -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PairingRequest:
    code: str
    channel: str
    account_id: str
    chat_id: str
    sender_id: str
    sender_name: str | None
    created_at: float


class PairingStore:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.path = channels_dir(home) / "pairing.yaml"

    def pending(self, now: float | None = None) -> list[PairingRequest]:
        now = time.time() if now is None else now
        items = _read_yaml(self.path).get("pending", [])
        out = []
        for raw in items if isinstance(items, list) else []:
            try:
                req = PairingRequest(
                    str(raw["code"]), str(raw["channel"]), str(raw["account"]),
                    str(raw["chat"]), str(raw["sender"]), raw.get("sender_name"),
                    float(raw["created_at"]),
                )
            except (KeyError, TypeError, ValueError):
                raise UsageError(f"{self.path}: a pending entry is malformed: {raw!r}") from None
            if now - req.created_at < PAIRING_TTL:
                out.append(req)
        return out

    def _save(self, items: list[PairingRequest]) -> None:
        _write_yaml(self.path, {"pending": [
            {"code": r.code, "channel": r.channel, "account": r.account_id, "chat": r.chat_id,
             "sender": r.sender_id, "sender_name": r.sender_name, "created_at": r.created_at}
            for r in items
        ]})

    def code_for(
        self, channel: str, account_id: str, chat_id: str, sender_id: str, sender_name: str | None
    ) -> str:
        """The sender's pending code (the same one again while it is valid)."""
        with locked(self.home):
            items = self.pending()
            for r in items:
                if (r.channel, r.account_id, r.sender_id) == (channel, account_id, sender_id):
                    return r.code
            code = "".join(secrets.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(8))
            items.append(PairingRequest(
                code, channel, account_id, chat_id, sender_id, sender_name, time.time()
            ))
            self._save(items)
        return code

    def drop_account(self, channel: str, account_id: str) -> None:
        """Forget the pending codes of a deleted account."""
        with locked(self.home):
            items = self.pending()
            kept = [r for r in items if (r.channel, r.account_id) != (channel, account_id)]
            if len(kept) != len(items):
                self._save(kept)

    def take(self, channel: str, code: str, account_id: str | None = None) -> PairingRequest:
        with locked(self.home):
            items = self.pending()
            for r in items:
                if account_id is not None and r.account_id != account_id:
                    continue
                if r.channel == channel and secrets.compare_digest(r.code, code.strip().upper()):
                    self._save([x for x in items if x is not r])
                    return r
        raise UsageError(
            f"no pending pairing code {code!r} for channel {channel} (codes expire after "
            f"{int(PAIRING_TTL // 60)} minutes; ask the user to message the bot again)"
        )


# --- gateway-status.json ------------------------------------------------------------------------


def signature(path: Path) -> str | None:
    """Which version of a file is on disk (mtime, size, inode: a replace always changes it)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return f"{st.st_mtime_ns}:{st.st_size}:{st.st_ino}"


@dataclass(frozen=True, slots=True)
class GatewaySnapshot:
    pid: int
    running: frozenset[tuple[str, str]]
    failed: Mapping[tuple[str, str], str]  # accounts whose adapter would not start: why
    seen: str | None  # the accounts.json version (`signature`) the gateway last acted on


class GatewayStatus:
    """What a running `tether channel-gateway` serves: its pid, the accounts whose adapters it
    started, those that failed to start and why, and which version of accounts.json that is;
    rewritten whenever that changes and removed when it stops."""

    def __init__(self, home: Path) -> None:
        self.path = channels_dir(home) / "gateway-status.json"

    def write(self, running: list[tuple[str, str]], failed: Mapping[tuple[str, str], str]
              | None = None, seen: str | None = None) -> None:
        body = {"pid": os.getpid(), "running": [f"{c}/{a}" for c, a in sorted(running)],
                "failed": {f"{c}/{a}": why for (c, a), why in (failed or {}).items()},
                "accounts_seen": seen, "updated_at": iso_now()}
        _write(self.path, orjson.dumps(body))

    def clear(self) -> None:
        try:
            raw = orjson.loads(self.path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return
        if isinstance(raw, dict) and raw.get("pid") == os.getpid():
            self.path.unlink(missing_ok=True)

    def read(self) -> GatewaySnapshot | None:
        """The live gateway's status; None when none is alive."""
        try:
            raw = orjson.loads(self.path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None
        if not isinstance(raw, dict) or not isinstance(raw.get("pid"), int):
            return None
        try:
            os.kill(raw["pid"], 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass  # alive, another user's

        def key(item: object) -> tuple[str, str]:
            channel, _, account = str(item).partition("/")
            return channel, account

        failed = raw.get("failed")
        seen = raw.get("accounts_seen")
        return GatewaySnapshot(
            raw["pid"], frozenset(key(i) for i in raw.get("running") or []),
            {key(k): str(v) for k, v in failed.items()} if isinstance(failed, dict) else {},
            seen if isinstance(seen, str) else None,
        )

    def running(self) -> set[tuple[str, str]]:
        """The accounts a live gateway runs (none when no gateway is alive)."""
        snap = self.read()
        return set(snap.running) if snap is not None else set()
