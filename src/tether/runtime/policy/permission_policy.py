"""The session's permission policy: settings and CLI rules, the workspace scope and tether's own
state guards, as the `decide` the turn engine calls for each tool call."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from tether.core.permissions import Call, Decision, Guards, Policy, RuleSet, Scope, decide
from tether.core.permissions.rules import Rule, canonical_tool_name, cli_allow_rule, parse_rule
from tether.core.tools import Tool, ToolContext
from tether.runtime.session.settings import Settings


class PermissionPolicy:
    """The session's rules and workspace, as the `decide` the turn engine calls for each call.

    The mode comes from the tool-context snapshot (it can change between turns); session allow
    rules (added when a client answers "always allow") live here, in memory."""

    def __init__(self, rules: RuleSet, scope: Scope, guards: Guards | None = None) -> None:
        self.rules = rules
        self.scope = scope
        self.guards = guards or Guards()
        # Whether this run can confine what the read-only auto-allow admits (asked on the first
        # shell call only); None: the run has no confinement, so such commands ask.
        self.confinable: Callable[[], bool] | None = None

    def read_denied(self) -> Callable[[Path], bool] | None:
        """For recursive readers (Grep): whether a file deny rule protects `path`; None when no
        file deny rule exists, so searches pay nothing."""
        denies = [r for r in self.rules.denies if r.kind == "path"]
        if not denies:
            return None
        only_denies = RuleSet(deny=tuple(denies))

        def denied(path: Path) -> bool:
            call = Call("Read", paths=(str(path),))
            return decide(call, Policy("unrestricted", only_denies, self.scope)).verdict == "deny"

        return denied

    def add_session_allow(self, rule: Rule) -> None:
        self.rules = self.rules.with_session_allow(rule)

    def __call__(self, tool: Tool, args: Mapping[str, Any], ctx: ToolContext) -> Decision:
        key = "cmd" if tool.name == "exec_command" else "command"  # Codex's shell names it cmd
        command = args.get(key) if canonical_tool_name(tool.name) == "Bash" else None
        admission = getattr(tool, "session_admission", None)  # write_stdin: its session's start
        start = getattr(tool, "session_start", None)
        accesses = getattr(tool, "accesses", None)  # ApplyPatch: what it does to each path
        call = Call(
            tool.name,
            args,
            paths=tuple(str(p) for p in tool.paths(args, ctx.cwd)),
            command=command if isinstance(command, str) else None,
            cwd=ctx.cwd,
            external=bool(getattr(tool, "external", False)),
            read_only_hint=bool(getattr(tool, "read_only_auto", False)),
            session=admission(args) if callable(admission) else None,
            mcp_server=_mcp_server(tool),
            session_start=start(args) if callable(start) else None,
            accesses=tuple((family, str(path)) for family, path in accesses(args, ctx.cwd))
            if callable(accesses) else (),
        )
        can_confine = (  # probed only where the read-only auto-allow could apply
            call.command is not None and ctx.permission_mode in ("standard", "acceptEdits", "plan")
            and self.confinable is not None and self.confinable()
        )
        return decide(call, Policy(ctx.permission_mode, self.rules, self.scope, self.guards,
                                   can_confine=can_confine))


def _mcp_server(tool: Tool) -> str | None:
    """The configured server name of an MCP tool (`mcp/tools.McpTool.server`): its tool name
    alone cannot say where the server's name ends (`mcp__git__evil__x`)."""
    server = getattr(tool, "server", None)
    return server if isinstance(server, str) and tool.name.startswith("mcp__") else None


def build_policy(
    settings: Settings, cwd: Path, home: Path,
    allowed_tools: Sequence[str] = (), disallowed_tools: Sequence[str] = (),
) -> PermissionPolicy:
    """The settings' rules with the run's `--allowedTools` / `--disallowedTools`, over the
    workspace at `cwd` (`home` expands `~` in rules)."""
    perms = settings.permissions
    rules = RuleSet(
        deny=perms.deny,
        cli_deny=tuple(parse_rule(t) for t in disallowed_tools),
        always_ask=perms.always_ask,
        cli_allow=tuple(cli_allow_rule(t) for t in allowed_tools),
        allow=perms.allow,
        ask=perms.ask,
    )
    scope = Scope.of(cwd, home, perms.additional_directories)
    scope = replace(scope, armed_names=sandbox_armed_names,
                    armed_files=_hook_scripts(settings, scope.cwd, scope.roots))
    return PermissionPolicy(rules, scope)


@cache
def sandbox_armed_names() -> frozenset[str]:
    """The names whose writing arms later execution, as the workspace sandbox guards them
    (`sandbox/armed.py`); imported on the first write decision, not at start-up."""
    from tether.core.permissions.paths import fold
    from tether.sandbox.armed import ARMED_NAMES

    return frozenset(fold(name) for name in ARMED_NAMES)


def _hook_scripts(settings: Settings, cwd: Path, roots: Sequence[Path]) -> tuple[Path, ...]:
    """The workspace files the settings' command hooks run (none configured: nothing loads)."""
    if settings.hooks_user is None and not settings.hooks_project:
        return ()
    from tether.runtime.extensions.hook_scripts import hook_scripts
    from tether.runtime.extensions.hooks import merge_hooks

    user = settings.user
    config = merge_hooks(settings.hooks_user, list(settings.hooks_project),
                         user_source=str(user.path) if user else "user settings")
    return hook_scripts(config, cwd, roots)


def file_guards(
    home: Path, agent_id: str, env: Mapping[str, str], writable: Any = None,
    scratch: Path | None = None,
) -> Guards:
    """Step 0 of every check: tether's own state (`home`: provider keys, other conversations,
    checkpoints, ledgers) is off limits to file tools and shell path words, except this agent's
    (and its parent's) memory tree and this conversation's `scratch` dir (overflow files,
    background logs); with the shell sandbox on, file writes keep to its writable roots."""
    from tether.backends.local.store import b64url

    agents = (home / "agents").resolve()
    ids = [agent_id, *([env["TETHER_PARENT_AGENT_ID"]] if env.get("TETHER_PARENT_AGENT_ID") else [])]
    own = tuple(agents / name for i in ids for name in (i, b64url(i)))
    roots = tuple(Path(r).resolve() for r in writable) if writable is not None else None
    # the global skills folder: a skill's SKILL.md points the model at its files there
    own_state = (*((scratch.resolve(),) if scratch is not None else ()), (home / "skills").resolve())
    return Guards(writable_roots=roots, agents_root=agents, own_agent_dirs=own,
                  state_root=home.resolve(), own_state_dirs=own_state)
