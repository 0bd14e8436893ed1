"""What a subagent child is before it runs: its type (bundled or custom Markdown), the parent
scope it inherits, its command line, the death-with-parent hook, and for memory-editing types
the memory-subagent sandbox around the whole process (the grant is spelled out in
`runtime/agents/subagents.py`'s docstring)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tether.errors import UsageError

if TYPE_CHECKING:
    from tether.sandbox import SandboxStatus, WrappedCommand

MEMORY_PROFILE = "memory-subagent"
MEMORY_SUBAGENT_TYPES = frozenset({"memory", "reflection", "history-analyzer"})
# Files and folders under TETHER_HOME a memory subagent may read but never change: what a later
# unsandboxed run would load as configuration or code.
PROTECTED_HOME_NAMES = ("settings.json", "trusted-folders.json", "providers", "mods", "skills")


@dataclass(frozen=True, slots=True)
class SubagentType:
    name: str
    description: str
    tools: tuple[str, ...] | None  # None: all tools
    system: str
    model: str | None = None
    source: str = "bundled"
    launch_profile: str | None = None  # MEMORY_PROFILE: the whole child runs in the memory sandbox


def parse_type(text: str, source: str) -> SubagentType:
    """Markdown with a small YAML-style frontmatter (`key: value` lines; tools as a csv)."""
    if not text.startswith("---\n"):
        raise UsageError(f"{source}: a subagent type starts with '---' frontmatter")
    head, sep, body = text[4:].partition("\n---\n")
    if not sep:
        raise UsageError(f"{source}: the frontmatter is not closed with '---'")
    meta: dict[str, str] = {}
    for n, line in enumerate(head.splitlines(), start=2):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, colon, value = line.partition(":")
        if not colon:
            raise UsageError(f"{source}:{n}: expected 'key: value'")
        meta[key.strip()] = value.strip().strip("\"'")
    if not meta.get("name"):
        raise UsageError(f"{source}: frontmatter needs a 'name'")
    tools_field = meta.get("tools", "all")
    tools = (
        None
        if tools_field in ("all", "*", "")
        else tuple(t.strip() for t in tools_field.split(",") if t.strip())
    )
    profile = meta.get("launchProfile") or (
        MEMORY_PROFILE if meta["name"] in MEMORY_SUBAGENT_TYPES else None
    )
    if profile not in (None, MEMORY_PROFILE, "default"):
        raise UsageError(
            f"{source}: launchProfile must be '{MEMORY_PROFILE}' or 'default', not {profile!r}"
        )
    return SubagentType(
        meta["name"],
        meta.get("description", ""),
        tools,
        body.strip(),
        meta.get("model") or None,
        source,
        profile if profile == MEMORY_PROFILE else None,
    )


BUNDLED_TYPES = Path(__file__).with_name("subagent_types")  # package data, next to this module


def discover_types(home: Path, cwd: Path, *, project_trusted: bool) -> dict[str, SubagentType]:
    """Bundled types, then `~/.tether/agents/*.md`, then (trusted projects) `.tether/agents/*.md`."""
    types: dict[str, SubagentType] = {}
    for entry in sorted(BUNDLED_TYPES.iterdir()):
        if entry.name.endswith(".md"):
            t = parse_type(entry.read_text(encoding="utf-8"), f"bundled:{entry.name}")
            types[t.name] = t
    dirs = [home / "agents"] + ([cwd / ".tether" / "agents"] if project_trusted else [])
    for directory in dirs:
        if directory.is_dir():
            for path in sorted(directory.glob("*.md")):
                t = parse_type(path.read_text(encoding="utf-8"), str(path))
                types[t.name] = replace(t, source=str(path))
    return types


@dataclass(frozen=True, slots=True)
class ParentScope:
    """What the parent run passes down, captured before a child is spawned."""

    agent_id: str
    conversation_id: str
    model: str
    cwd: Path
    allowed_tools: tuple[str, ...] = ()
    disallowed_tools: tuple[str, ...] = ()
    max_turns: int | None = None
    trusted: bool = False  # the parent applied this folder's project settings
    tether_home: Path | None = None  # None: $TETHER_HOME (or ~/.tether) at spawn time
    mcp_config: tuple[str, ...] = ()  # the parent's --mcp-config values: children start their own
    strict_mcp_config: bool = False
    # The parent's backend: "cloud" makes the child a cloud run on the same Letta server
    # (`--backend cloud`, TETHER_BACKEND and `backend_env`); None: found by `with_parent_backend`.
    backend: str | None = None
    backend_env: tuple[tuple[str, str], ...] = ()  # LETTA_BASE_URL / LETTA_API_KEY for the child
    # The parent's PostgreSQL store (a fleet server's, or `tether -p --store`'s): the child runs
    # with `--store <it>`, so its agent and transcript are the fleet's, not this machine's.
    store_url: str | None = None


def store_url(store: object) -> str | None:
    """The URL of `store` when it is the PostgreSQL store (`PgConversationStore`), else None.
    Nothing of the postgres backend is imported here: a store of a module never imported is
    not one of its instances."""
    module = sys.modules.get("tether.backends.postgres.agents")
    if module is None or not isinstance(store, module.PgConversationStore):
        return None
    url = store.session.url
    return url if isinstance(url, str) else None


def store_for_child(
    scope: ParentScope, kind: SubagentType, env: Mapping[str, str]
) -> tuple[ParentScope, str | None]:
    """The scope a child of `kind` is launched with, and why it leaves the parent's store out
    (None: it does not). A memory-sandboxed child cannot open a Unix socket (the sandbox's
    seccomp filter refuses AF_UNIX, or any daemon on the machine would be in reach), so with a
    store libpq reaches through one it runs on this machine's TETHER_HOME, as before fleets:
    what it is for, the parent's memory, still reaches the store with the parent's next sync."""
    if scope.store_url is None or kind.launch_profile != MEMORY_PROFILE:
        return scope, None
    if env.get("TETHER_FS_SANDBOX", "").strip().lower() in ("0", "false"):
        return scope, None  # runs unconfined on purpose: it can reach the store
    if not unix_socket_store(scope.store_url, env):
        return scope, None
    return replace(scope, store_url=None), (
        "memory subagents keep their own records in this machine's TETHER_HOME: the "
        "PostgreSQL store is reached through a Unix socket, which their sandbox refuses (reach "
        "it over TCP to keep them in the store; the parent's memory is synced either way)"
    )


def unix_socket_store(url: str, env: Mapping[str, str]) -> bool:
    """Whether libpq reaches the store at `url` through a Unix socket: a host that is a path
    (or `@abstract`), or none at all (its default socket directory), unless `hostaddr` names
    an address."""
    from urllib.parse import parse_qs, unquote, urlsplit

    parts = urlsplit(url)
    query = parse_qs(parts.query)
    if query.get("hostaddr"):
        return False
    hosts = query.get("host") or [unquote(parts.netloc.rpartition("@")[2].partition(":")[0])]
    host = hosts[-1] or env.get("PGHOST", "")
    return any(h == "" or h.startswith(("/", "@")) for h in host.split(","))


def with_parent_backend(scope: ParentScope, env: Mapping[str, str]) -> ParentScope:
    """The scope with the parent's backend filled in when its builder did not say: a cloud
    parent's agent is mirrored locally with `backend: cloud` (runtime/session/backend_choice.py), and
    its Letta server is where `env` and `tether connect letta` point, as for the parent."""
    if scope.backend is not None:
        return scope
    if scope.store_url is not None:  # agents on the PostgreSQL store are local ones
        return replace(scope, backend="local")
    from tether.backends.local.store import LocalStore
    from tether.errors import NotFound
    from tether.runtime.session.session import tether_home

    home = (scope.tether_home or tether_home(env)).expanduser().absolute()
    try:
        agent = LocalStore(home).get_agent(scope.agent_id)
    except (NotFound, OSError, ValueError):
        return replace(scope, backend="local")
    if agent.extra.get("backend") != "cloud":
        return replace(scope, backend="local")
    from tether.runtime.session.backend_choice import letta_server

    server = letta_server(env, home)
    settings = [("LETTA_BASE_URL", server.base_url)]
    if server.api_key:
        settings.append(("LETTA_API_KEY", server.api_key))
    return replace(scope, backend="cloud", backend_env=tuple(settings))


def backend_env(scope: ParentScope) -> dict[str, str]:
    """What a child needs in its environment to reach its parent's backend."""
    if scope.backend != "cloud":
        return {}
    return {"TETHER_BACKEND": "cloud", **dict(scope.backend_env)}


def child_command() -> list[str]:
    return [sys.executable, "-m", "tether"]


def child_argv(
    kind: SubagentType,
    scope: ParentScope,
    model: str | None,
    command: Sequence[str] | None = None,
    target: Sequence[str] = (),
) -> list[str]:
    """The child's command line; `target` (an existing agent's conversation flags, from
    `subagent_targets.Target.argv`) replaces the new agent, which keeps its own model unless
    the call names one."""
    argv = [
        *(command or child_command()),
        "-p",
        "--output-format",
        "stream-json",
        "--permission-mode",
        "unrestricted",
    ]
    if target:
        argv += [*target, *(["--model", model] if model else [])]
    else:
        argv += [
            "--new-agent",
            "--system-custom",
            kind.system,
            "--tags",
            f"type:{kind.name},parent:{scope.agent_id}",
            "--model",
            model or kind.model or scope.model,
        ]
    if kind.tools is not None:
        argv += ["--tools", ",".join(kind.tools)]
    if scope.allowed_tools:
        argv += ["--allowedTools", ",".join(scope.allowed_tools)]
    if scope.disallowed_tools:
        argv += ["--disallowedTools", ",".join(scope.disallowed_tools)]
    if scope.max_turns is not None:
        argv += ["--max-turns", str(scope.max_turns)]
    if scope.trusted:
        argv.append("--trust")
    for value in scope.mcp_config:  # settings and .mcp.json servers the child reads itself
        argv += ["--mcp-config", value]
    if scope.strict_mcp_config:
        argv.append("--strict-mcp-config")
    if scope.backend == "cloud":  # the reference passes `--backend` to its children too
        argv += ["--backend", "cloud"]
    if scope.store_url is not None:
        # On argv like the server's own `--store` (whose command line already shows it).
        argv += ["--store", scope.store_url]
    return argv


def die_with_parent() -> Callable[[], None] | None:
    """A preexec function giving the child PR_SET_PDEATHSIG=SIGTERM (Linux; None elsewhere).

    The signal fires when the spawning thread exits, so children are spawned from the event
    loop's thread, which lives as long as the run. A parent that died between fork and prctl
    is caught by comparing the parent pid."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(143)

    return preexec


def memory_sandboxed(
    scope: ParentScope,
    tmp_dir: Path,
    argv: Sequence[str],
    env: dict[str, str],
    status: SandboxStatus | None = None,
) -> tuple[WrappedCommand | None, str | None]:
    """The memory-subagent launch of `argv`: (what to spawn, None) inside the memory sandbox, or
    (None, None) to run it as is because `TETHER_FS_SANDBOX=0|false` or an enclosing tether
    sandbox already holds it, or (None, why) when no backend works (the caller says so once).
    Adds `MEMORY_DIR` / `TETHER_MEMORY_DIR` (the parent's memory) to `env` in every case."""
    from tether.backends.local.store import b64url
    from tether.runtime.session.session import tether_home
    from tether.sandbox import memory_subagent_policy, probe, wrap_command
    from tether.sandbox.bwrap import SANDBOX_ENV

    home = (scope.tether_home or tether_home(env)).expanduser().absolute()
    parent = scope.agent_id
    env["MEMORY_DIR"] = env["TETHER_MEMORY_DIR"] = str(home / "agents" / parent / "memory")
    if env.get("TETHER_FS_SANDBOX", "").strip().lower() in ("0", "false"):
        return None, None
    from tether.sandbox import inside_tether_sandbox

    if SANDBOX_ENV in env and inside_tether_sandbox():
        return None, None  # the parent's own sandbox holds it (sandboxes never nest)
    status = status or probe()
    if status.backend is None:
        return None, "; ".join(status.reasons[:1]) or "no sandbox backend"
    agents = home / "agents"
    entries = _list_dir(agents)
    others = [d.name for d in entries if d.is_dir() and d.name not in (parent, b64url(parent))]
    protected = [home / name for name in PROTECTED_HOME_NAMES]
    protected += [p for p in entries if p.suffix in (".json", ".md") and p.is_file()]
    tmp_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    scratchpad = [Path(env["TETHER_SCRATCHPAD"])] if env.get("TETHER_SCRATCHPAD") else []
    policy = memory_subagent_policy(
        home,
        None,
        parent,
        home=env.get("HOME") or None,
        tmp_dir=tmp_dir,
        base_writable=[home, *scratchpad],
        hidden_agents=others,
        writable_memories=[parent],
        readonly=[scope.cwd, *(p for p in protected if p.exists())],
        network=True,
    )
    wrapped = wrap_command(policy, argv, cwd=scope.cwd, env=env, status=status)
    wrapped.env["TETHER_FS_SANDBOX"] = "0"  # its shell is inside this sandbox already
    return wrapped, None


def _list_dir(path: Path) -> list[Path]:
    try:
        return sorted(path.iterdir())
    except OSError:
        return []
