"""MCP server configuration in the shapes users already have, validated and trust-filtered.

Sources, in precedence order (a later source's server of the same name replaces an earlier one):

    $TETHER_HOME/settings.json  "mcpServers"     user
    <cwd>/.mcp.json             "mcpServers"     project (Claude Code's file)
    <cwd>/.tether/settings.json "mcpServers"     project
    <cwd>/.tether/settings.local.json            local
    --mcp-config FILE|JSON (repeatable)          command line

Each server is `{"command", "args", "env", "cwd"}` (stdio; `"type": "stdio"` optional) or
`{"type": "http"|"sse", "url", "headers"}`, with optional `timeout` (milliseconds, Gemini CLI's
field: the limit of every request to that server, its start and each tool call) and
`autoAllowReadOnly` (its tools annotated `readOnlyHint` run without asking; off by default).
Strings expand `${VAR}` and `${VAR:-default}` from the run's environment as Claude Code does; a
variable that is unset with no default is an error naming the server and the field.
`parse_timeout_ms` is the one check of every MCP timeout (this field, the `mcpToolTimeout`
setting, the `MCP_TOOL_TIMEOUT` variable). Project servers start only in a trusted folder; until then they are
held back and `held_back` says which. Nothing here imports the MCP SDK.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from tether.errors import UsageError

Transport = Literal["stdio", "http", "sse"]
Source = Literal["user", "project", "local", "cli"]
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_STDIO_KEYS = {"type", "command", "args", "env", "cwd", "timeout", "autoAllowReadOnly"}
_REMOTE_KEYS = {"type", "url", "headers", "timeout", "autoAllowReadOnly"}
MAX_TIMEOUT_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    name: str
    transport: Transport
    source: Source
    origin: str  # the file (or "--mcp-config") it came from, for messages
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    # per server, seconds: bounds its start and each tool call; None: the run's defaults
    timeout_s: float | None = None
    # run the tools the server annotates readOnlyHint without asking (standard/acceptEdits)
    auto_allow_read_only: bool = False

    def describe(self) -> dict[str, Any]:
        """The JSON shape `tether mcp list/get` prints (no secret header values)."""
        out: dict[str, Any] = {"name": self.name, "type": self.transport, "scope": self.source,
                               "origin": self.origin}
        if self.transport == "stdio":
            out.update(command=self.command, args=list(self.args), env=sorted(self.env))
            if self.cwd is not None:
                out["cwd"] = str(self.cwd)
        else:
            out.update(url=self.url, headers=sorted(self.headers))
        if self.timeout_s is not None:
            out["timeout"] = round(self.timeout_s * 1000)
        return out


@dataclass(frozen=True, slots=True)
class McpConfig:
    servers: tuple[McpServerConfig, ...] = ()
    held_back: tuple[str, ...] = ()  # messages for stderr: project servers an untrusted folder kept


def parse_servers(
    raw: Any, *, source: Source, origin: str, env: Mapping[str, str], base: Path
) -> list[McpServerConfig]:
    """The servers of one `mcpServers` object; UsageError naming `origin` and the server."""
    if not isinstance(raw, dict):
        raise UsageError(f'{origin}: "mcpServers" must be an object of servers by name')
    out = []
    for name, spec in raw.items():
        where = f"{origin}: mcpServers.{name}"
        if not isinstance(name, str) or not _NAME.match(name):
            raise UsageError(f"{where}: a server name is 1-64 letters, digits, '_' or '-'")
        if not isinstance(spec, dict):
            raise UsageError(f"{where} must be an object")
        out.append(_parse_one(name, spec, where, source, origin, env, base))
    return out


def _parse_one(
    name: str, spec: dict[str, Any], where: str, source: Source, origin: str,
    env: Mapping[str, str], base: Path,
) -> McpServerConfig:
    kind = spec.get("type", "stdio" if "command" in spec else None)
    if kind not in ("stdio", "http", "sse", "streamable-http"):
        raise UsageError(f'{where}: "type" must be "stdio", "http" or "sse" (or give a "command")')
    transport: Transport = "http" if kind == "streamable-http" else kind
    allowed = _STDIO_KEYS if transport == "stdio" else _REMOTE_KEYS
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(sorted(allowed))}")
    timeout = spec.get("timeout")
    timeout_s = parse_timeout_ms(timeout, f"{where}.timeout") / 1000 if timeout is not None else None
    auto_read_only = spec.get("autoAllowReadOnly", False)
    if not isinstance(auto_read_only, bool):
        raise UsageError(f"{where}.autoAllowReadOnly must be true or false")

    def text(key: str, value: Any) -> str:
        if not isinstance(value, str):
            raise UsageError(f"{where}.{key} must be a string")
        return expand(value, env, f"{where}.{key}")

    def mapping(key: str) -> dict[str, str]:
        value = spec.get(key, {})
        if not isinstance(value, dict):
            raise UsageError(f"{where}.{key} must be an object of strings")
        return {str(k): text(f"{key}.{k}", v) for k, v in value.items()}

    if transport == "stdio":
        command = text("command", spec.get("command"))
        if not command.strip():
            raise UsageError(f"{where}.command is empty")
        args = spec.get("args", [])
        if not isinstance(args, list):
            raise UsageError(f"{where}.args must be a list of strings")
        cwd = None
        if spec.get("cwd") is not None:
            cwd = Path(os.path.expanduser(text("cwd", spec["cwd"])))
            cwd = cwd if cwd.is_absolute() else base / cwd
        return McpServerConfig(
            name, "stdio", source, origin, command=command,
            args=tuple(text(f"args[{i}]", a) for i, a in enumerate(args)), env=mapping("env"),
            cwd=cwd, timeout_s=timeout_s, auto_allow_read_only=auto_read_only,
        )
    url = text("url", spec.get("url"))
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"{where}.url must be an http:// or https:// URL, got {url!r}")
    return McpServerConfig(name, transport, source, origin, url=url, headers=mapping("headers"),
                           timeout_s=timeout_s, auto_allow_read_only=auto_read_only)


def parse_timeout_ms(value: Any, where: str) -> int:
    """An MCP timeout in milliseconds (a whole number, 1 ms to a day); UsageError naming `where`
    and the value otherwise. An environment variable's text is given as `int(text)` when it is
    digits, as itself (and refused) when not."""
    number = int(value) if isinstance(value, float) and value.is_integer() else value
    if isinstance(number, bool) or not isinstance(number, int) or not 0 < number <= MAX_TIMEOUT_MS:
        raise UsageError(f"{where} must be a whole number of milliseconds from 1 to {MAX_TIMEOUT_MS} "
                         f"(a day), not {value!r}")
    return number


def expand(value: str, env: Mapping[str, str], where: str) -> str:
    """`${VAR}` and `${VAR:-default}` from `env`; an unset variable without default is an error."""

    def one(match: re.Match[str]) -> str:
        var, default = match.group(1), match.group(2)
        if var in env:
            return env[var]
        if default is not None:
            return default
        raise UsageError(f"{where}: ${{{var}}} is not set (set it, or write ${{{var}:-default}})")

    if "\x00" in value:
        raise UsageError(f"{where} contains a NUL byte")
    return _VAR.sub(one, value)


def read_cli_value(value: str, cwd: Path) -> tuple[Any, str]:
    """An `--mcp-config` value: inline JSON (starts with `{`) or a file; (mcpServers, origin)."""
    origin = "--mcp-config"
    if value.lstrip().startswith("{"):
        text: str | bytes = value
    else:
        path = Path(os.path.expanduser(value))
        path = path if path.is_absolute() else cwd / path
        origin = f"--mcp-config {path}"
        try:
            text = path.read_bytes()
        except OSError as exc:
            raise UsageError(f"--mcp-config {value}: cannot read ({exc.strerror})") from None
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{origin}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{origin}: must be a JSON object")
    return data.get("mcpServers", data), origin


def read_json_object(path: Path) -> dict[str, Any] | None:
    """A JSON object file (empty: `{}`), None when it does not exist; UsageError naming the file
    when it cannot be read or is not an object."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        data = orjson.loads(raw) if raw.strip() else {}
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: must be a JSON object, not {type(data).__name__}")
    return data


def project_file(cwd: Path) -> tuple[Any, str] | None:
    """`<cwd>/.mcp.json`'s `mcpServers`, or None when there is no such file."""
    path = cwd / ".mcp.json"
    data = read_json_object(path)
    return None if data is None else (data.get("mcpServers", {}), str(path))


def resolve_config(
    settings_sources: Iterable[tuple[Source, str, Any]],
    cli_values: Iterable[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    trusted: bool,
    project_file_too: bool = True,  # False with --strict-mcp-config
) -> McpConfig:
    """Every configured server after precedence and trust; `settings_sources` are
    (scope, file, mcpServers) of the settings files in the reference's order."""
    sources: list[tuple[Source, str, Any]] = []
    settings = list(settings_sources)
    sources.extend(s for s in settings if s[0] == "user")
    found = project_file(cwd) if project_file_too else None
    if found is not None:
        sources.append(("project", found[1], found[0]))
    sources.extend(s for s in settings if s[0] != "user")
    for value in cli_values:
        raw, origin = read_cli_value(value, cwd)
        sources.append(("cli", origin, raw))
    by_name: dict[str, McpServerConfig] = {}
    held: dict[str, list[str]] = {}
    for source, origin, raw in sources:
        for server in parse_servers(raw, source=source, origin=origin, env=env, base=cwd):
            if source in ("project", "local") and not trusted:
                held.setdefault(origin, []).append(server.name)
                continue
            by_name[server.name] = server
    messages = tuple(
        f"not starting MCP server(s) {', '.join(names)} from {origin}: this folder is not "
        "trusted (run `tether trust` in the folder, or pass --trust)"
        for origin, names in held.items()
    )
    return McpConfig(tuple(by_name.values()), messages)
