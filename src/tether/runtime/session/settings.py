"""Settings files, read once per run: user, project, project-local, in the reference's order.

    $TETHER_HOME/settings.json               user (always trusted)
    <cwd>/.tether/settings.json              project (shared, checked in)
    <cwd>/.tether/settings.local.json        local (this machine)

`permissions` lists are concatenated in that order (duplicates dropped) and `mode` comes from the
last file that sets it. A file that is not JSON, a key of the wrong type, an unknown permission
key or a malformed rule is an error naming the file and the key: nothing is silently ignored.

Until the folder is trusted (`runtime/policy/trust.py`), project and local files may only tighten: their
deny / ask / alwaysAsk rules apply, a stricter mode applies, but their allow rules, extra
directories, looser mode, hooks and sandbox loosening are set aside, and `ignored` says so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from tether.core.permissions.modes import MODE_STRICTNESS, normalize_mode
from tether.core.permissions.rules import Rule, dedup, parse_rules
from tether.errors import UsageError
from tether.runtime.policy.trust import TrustState

Scope = Literal["user", "project", "local"]
_PERMISSION_KEYS = {"mode", "defaultMode", "allow", "deny", "ask", "alwaysAsk", "additionalDirectories"}


@dataclass(frozen=True, slots=True)
class SettingsFile:
    path: Path
    scope: Scope
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class PermissionSettings:
    mode: str | None = None
    allow: tuple[Rule, ...] = ()
    deny: tuple[Rule, ...] = ()
    ask: tuple[Rule, ...] = ()
    always_ask: tuple[Rule, ...] = ()
    additional_directories: tuple[Path, ...] = ()


@dataclass(frozen=True, slots=True)
class Settings:
    files: tuple[SettingsFile, ...] = ()
    permissions: PermissionSettings = field(default_factory=PermissionSettings)
    hooks_user: Any = None
    hooks_project: tuple[tuple[str, Any], ...] = ()  # (source, raw), local first: merge order
    sandbox: dict[str, Any] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()  # what untrusted project files asked for and did not get
    trust: TrustState | None = None  # None: no project files
    # (scope, file, raw "mcpServers") in file order; validated and trust-filtered by tether.mcp
    mcp_sources: tuple[tuple[Scope, str, Any], ...] = ()
    mcp_tool_timeout_ms: int | None = None  # "mcpToolTimeout": each MCP tool call's limit

    @property
    def user(self) -> SettingsFile | None:
        return next((f for f in self.files if f.scope == "user"), None)


def read_settings_file(path: Path, scope: Scope) -> SettingsFile | None:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read settings ({exc.strerror})") from None
    try:
        data = orjson.loads(raw) if raw.strip() else {}
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: settings must be a JSON object, not {type(data).__name__}")
    return SettingsFile(path, scope, data)


def settings_paths(home: Path, cwd: Path) -> list[tuple[Path, Scope]]:
    user = home / "settings.json"
    out: list[tuple[Path, Scope]] = [(user, "user")]
    project: tuple[tuple[str, Scope], ...] = (
        ("settings.json", "project"),
        ("settings.local.json", "local"),
    )
    for name, scope in project:
        path = cwd / ".tether" / name
        # With cwd = the parent of TETHER_HOME the "project" file is the user file: read it once.
        if os.path.abspath(path) != os.path.abspath(user):
            out.append((path, scope))
    return out


def load_settings(home: Path, cwd: Path, trust: TrustState | None = None) -> Settings:
    """Read and validate every settings file; `trust` is the folder's state (None: look it up)."""
    files = [f for p, s in settings_paths(home, cwd) if (f := read_settings_file(p, s))]
    project_files = [f for f in files if f.scope != "user"]
    if project_files and trust is None:
        from tether.runtime.policy.trust import TrustStore

        trust = TrustStore(home).state(cwd)
    trusted = trust == "trusted"
    ignored: list[str] = []
    mode: str | None = None
    lists: dict[str, list[Rule]] = {"allow": [], "deny": [], "ask": [], "alwaysAsk": []}
    dirs: list[Path] = []
    sandbox: dict[str, Any] = {}
    hooks_user: Any = None
    hooks_project: list[tuple[str, Any]] = []
    mcp_sources: list[tuple[Scope, str, Any]] = []
    mcp_tool_timeout_ms: int | None = None
    for f in files:
        widening: list[str] = []
        perms = f.data.get("permissions", {})
        if not isinstance(perms, dict):
            raise UsageError(f"{f.path}: \"permissions\" must be an object")
        unknown = sorted(set(perms) - _PERMISSION_KEYS)
        if unknown:
            raise UsageError(
                f"{f.path}: unknown permissions key(s) {', '.join(unknown)}; "
                f"valid keys: {', '.join(sorted(_PERMISSION_KEYS))}"
            )
        for key in ("deny", "ask", "alwaysAsk", "allow"):
            value = perms.get(key, [])
            if not isinstance(value, list):
                raise UsageError(f"{f.path}: permissions.{key} must be a list of rules")
            rules = parse_rules(value, f"{f.path}: permissions.{key}")
            if key == "allow" and f.scope != "user" and not trusted and rules:
                widening.append("permissions.allow")
                continue
            lists[key].extend(rules)
        file_mode = perms.get("mode", perms.get("defaultMode"))
        if file_mode is not None:
            if not isinstance(file_mode, str):
                raise UsageError(f"{f.path}: permissions.mode must be a string")
            try:
                file_mode = normalize_mode(file_mode)
            except UsageError as exc:
                raise UsageError(f"{f.path}: permissions.mode: {exc}") from None
            current = mode or "standard"
            if f.scope != "user" and not trusted and MODE_STRICTNESS[file_mode] > MODE_STRICTNESS[current]:
                widening.append(f"permissions.mode {file_mode}")
            else:
                mode = file_mode
        extra = perms.get("additionalDirectories", [])
        if not isinstance(extra, list) or not all(isinstance(d, str) for d in extra):
            raise UsageError(f"{f.path}: permissions.additionalDirectories must be a list of paths")
        if extra and f.scope != "user" and not trusted:
            widening.append("permissions.additionalDirectories")
        else:
            for index, d in enumerate(extra):
                path = Path(os.path.expanduser(d))
                path = path if path.is_absolute() else cwd / path
                if not path.is_dir():
                    raise UsageError(
                        f"{f.path}: permissions.additionalDirectories[{index}]: {d!r} is not a directory"
                    )
                dirs.append(path.resolve())
        hooks = f.data.get("hooks")
        if hooks is not None:
            if f.scope == "user":
                hooks_user = hooks
            elif trusted:
                hooks_project.insert(0, (str(f.path), hooks))
            else:
                widening.append("hooks")
        box = f.data.get("sandbox")
        if box is not None:
            if not isinstance(box, dict):
                raise UsageError(f"{f.path}: \"sandbox\" must be an object")
            loosens = (
                box.get("network") is True
                or box.get("enabled") is False
                or box.get("allowUnixSockets") is True
                or bool(box.get("keepEnv"))
                or box.get("backend") not in (None, "auto", "bwrap")  # a weaker backend
            )
            if f.scope != "user" and not trusted and loosens:
                widening.append("sandbox")
            else:
                sandbox.update(box)
        if f.data.get("mcpServers") is not None:
            mcp_sources.append((f.scope, str(f.path), f.data["mcpServers"]))
        if f.data.get("mcpToolTimeout") is not None:
            from tether.mcp.config import parse_timeout_ms

            limit = parse_timeout_ms(f.data["mcpToolTimeout"], f"{f.path}: mcpToolTimeout")
            if f.scope != "user" and not trusted:
                widening.append("mcpToolTimeout")
            else:
                mcp_tool_timeout_ms = limit
        if f.data.get("mods") is not None and f.scope != "user" and not trusted:
            widening.append("mods")
        if widening:
            why = (
                "its settings changed since the folder was trusted"
                if trust == "changed"
                else "this folder is not trusted"
            )
            ignored.append(
                f"ignoring {', '.join(widening)} from {f.path}: {why} "
                "(run `tether trust` in the folder, or pass --trust)"
            )
    permissions = PermissionSettings(
        mode,
        dedup(lists["allow"]),
        dedup(lists["deny"]),
        dedup(lists["ask"]),
        dedup(lists["alwaysAsk"]),
        tuple(dict.fromkeys(dirs)),
    )
    return Settings(
        tuple(files),
        permissions,
        hooks_user,
        tuple(hooks_project),
        sandbox,
        tuple(ignored),
        trust if project_files else None,
        tuple(mcp_sources),
        mcp_tool_timeout_ms,
    )
