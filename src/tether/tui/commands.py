"""Slash commands (`/help`, `/model`, `/new`, `/resume`, ...) and the list picker they open.

A command line is `/name [argument]`; each handler gets the app and the argument. Commands that
change the session (conversation, model) wait for an idle session; the others run any time.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from tether.errors import TetherError

if TYPE_CHECKING:
    from tether.tui.app import TetherApp

Handler = Callable[["TetherApp", str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class SlashCommand:
    name: str
    summary: str
    run: Handler
    idle_only: bool = False
    usage: str = ""


class PickerScreen(ModalScreen[str | None]):
    """A keyboard list: arrows + enter choose, Esc cancels (dismisses with None)."""

    BINDINGS = [Binding("escape", "cancel", "cancel", show=False)]

    def __init__(self, title: str, options: list[tuple[str, str]]) -> None:
        super().__init__(classes="picker")
        self.title_text = title
        self.options = options

    def compose(self) -> ComposeResult:
        with Vertical(id="picker-box"):
            yield Static(Text(self.title_text, style="bold"))
            yield OptionList(*(Option(label, id=key) for key, label in self.options), id="picker-list")
            yield Static(Text("↑↓ enter choose · esc cancel", style="dim"))

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)


def parse_command(text: str) -> tuple[str, str] | None:
    """("model", "openai/gpt-5.5") for "/model openai/gpt-5.5"; None for a normal prompt."""
    stripped = text.strip()
    if not stripped.startswith("/") or stripped.startswith("//") or len(stripped) < 2:
        return None
    name, _, arg = stripped[1:].partition(" ")
    if "/" in name:  # a path such as /etc/hosts is a prompt, not a command
        return None
    return name.lower(), arg.strip()


async def run_command(app: TetherApp, name: str, arg: str) -> None:
    command = COMMANDS.get(ALIASES.get(name, name))
    if command is None and name.startswith("mcp__") and await _mcp_prompt(app, name, arg):
        return
    if command is None:
        app.notice(f"Unknown command /{name}; /help lists them", "error")
        return
    if command.idle_only and app.busy:
        app.notice(f"/{command.name} waits for an idle session: press Esc to interrupt the turn first", "error")
        return
    try:
        await command.run(app, arg)
    except TetherError as exc:
        app.notice(f"/{command.name}: {exc}", "error")


# --- handlers ----------------------------------------------------------------------------------


async def _help(app: TetherApp, arg: str) -> None:
    lines = ["Commands:"]
    for c in COMMANDS.values():
        lines.append(f"  /{c.name}{' ' + c.usage if c.usage else ''}  —  {c.summary}")
    lines += [
        "Keys:",
        "  enter send · shift+enter or ctrl+j new line · ↑/↓ prompt history",
        "  esc interrupt the running turn (typed prompts wait in a queue meanwhile)",
        "  shift+tab cycle permission mode · ctrl+c twice exit",
    ]
    app.notice("\n".join(lines))


async def _model(app: TetherApp, arg: str) -> None:
    from tether.tui.sessions import model_choices, switch_model

    handle = arg
    if not handle:
        choices = model_choices(app.prepared)
        picked = await app.pick(
            f"Model (now {app.prepared.session.model}; or type /model <provider>/<model>)",
            [(h, h + ("  (current)" if h == app.prepared.session.model else "")) for h in choices],
        )
        if picked is None:
            return
        handle = picked
    switch_model(app.prepared, handle)
    app.notice(f"Model: {handle} (for the next turns of this session)")
    app.refresh_status()


async def _new(app: TetherApp, arg: str) -> None:
    from tether.tui.sessions import new_conversation

    conv = new_conversation(app.prepared)
    app.transcript.clear()
    app.notice(f"New conversation {conv}")
    app.refresh_status()


def _ago(mtime: float) -> str:
    if not mtime:
        return "never"
    s = max(0, int(time.time() - mtime))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s // size} {unit} ago"
    return f"{s} s ago"


async def _resume(app: TetherApp, arg: str) -> None:
    from tether.tui.sessions import summarize

    target = arg
    if not target:
        agent = app.prepared.session.agent.id
        current = app.prepared.session.conversation_id
        options = [
            (s.id, f"{s.id:<16} {s.messages:>4} msgs  {_ago(s.modified):>10}  {s.preview}"
             + ("  (current)" if s.id == current else ""))
            for s in summarize(app.prepared.store, agent)
            if s.messages or s.id == current
        ]
        if not options:
            app.notice("No conversations of this agent to resume yet")
            return
        picked = await app.pick("Resume a conversation of this agent", options)
        if picked is None:
            return
        target = picked
    await app.open_conversation(target)


async def _agents(app: TetherApp, arg: str) -> None:
    agents = app.prepared.store.list_agents()
    current = app.prepared.session.agent.id
    lines = [f"Agents in {app.prepared.store.home}:"]
    for a in agents:
        mark = "▶" if a.id == current else " "
        lines.append(f" {mark} {a.id}  {a.name}  model {a.model or '(default)'}")
    lines.append("Start another with `tether --agent <id>` or `tether --new-agent`.")
    app.notice("\n".join(lines))


async def _compact(app: TetherApp, arg: str) -> None:
    from tether.backends.local.backend import LocalBackend

    p = app.prepared
    if not isinstance(p.backend, LocalBackend):
        app.notice("/compact: a hosted conversation is compacted by its Letta server")
        return
    app.notice("Compacting the conversation…", "dim")
    with p.store.turn_lock(p.session.agent.id, p.session.conversation_id):
        done = await p.backend.compact(p.conversation)
    stats = ", ".join(f"{k} {v}" for k, v in done.stats.items())
    app.notice(f"Compacted{': ' + stats if stats else ''}\n{done.summary}".rstrip())


async def _memory(app: TetherApp, arg: str) -> None:
    memfs = app.prepared.services.memfs
    if memfs is None or not memfs.exists:
        app.notice("Memory: this agent has no memory repository (MemFS) in this run")
        return
    paths = memfs.head_paths()
    blocks = [x for x in paths if x.startswith("system/") and x.endswith(".md")]
    lines = [f"Memory at {memfs.root} (revision {(memfs.revision() or 'none')[:12]}):"]
    for path in blocks:
        text = memfs.read_head(path) or ""
        first = next((line for line in text.splitlines() if line.strip() and not line.startswith("---")), "")
        lines.append(f"  {path}  ({len(text):,} chars)  {first[:70]}")
    others = len(paths) - len(blocks)
    if not blocks:
        lines.append("  no system blocks")
    if others:
        lines.append(f"  and {others} other files (`tether memory status` for details)")
    app.notice("\n".join(lines))


async def _permissions(app: TetherApp, arg: str) -> None:
    from tether.core.permissions import PERMISSION_MODES, normalize_mode

    p = app.prepared
    words = arg.split()
    if words and words[0] == "mode":
        words = words[1:]
    if words:
        mode = normalize_mode(words[0])
        from tether.runtime.turns.plan_mode import set_mode

        set_mode(p, mode)  # plan mode offers ExitPlanMode
        app.notice(f"Permission mode: {mode} (from the next tool call on)")
        app.refresh_status()
        return
    lines = [f"Permission mode: {p.flags.permission_mode}   (modes: {', '.join(PERMISSION_MODES)};"
             " change with /permissions <mode> or shift+tab)"]
    policy = p.policy
    if policy is not None:
        r = policy.rules
        for label, rules in (
            ("deny (settings)", r.deny), ("deny (--disallowedTools)", r.cli_deny),
            ("always ask", r.always_ask), ("allow (--allowedTools)", r.cli_allow),
            ("allow (this session)", r.session_allow), ("allow (settings)", r.allow),
            ("ask (settings)", r.ask),
        ):
            if rules:
                lines.append(f"  {label}: {', '.join(str(x) for x in rules)}")
        if not any((r.deny, r.cli_deny, r.always_ask, r.cli_allow, r.session_allow, r.allow, r.ask)):
            lines.append("  no rules")
    app.notice("\n".join(lines))


async def _hooks(app: TetherApp, arg: str) -> None:
    hooks = app.prepared.hooks
    config = hooks.config if hooks is not None else None
    if config is None or not any(config.events.values()):
        app.notice("No hooks configured (settings.json \"hooks\")")
        return
    lines = ["Hooks" + (" (disabled)" if config.disabled else "") + ":"]
    for event, groups in config.events.items():
        for g in groups:
            for h in g.hooks:
                matcher = f" [{g.matcher}]" if g.matcher else ""
                lines.append(f"  {event}{matcher}: {h.command}  (timeout {h.timeout_s:g}s)")
    app.notice("\n".join(lines))


async def _mods(app: TetherApp, arg: str) -> None:
    session = app.prepared.mods
    engine = getattr(session, "engine", None)
    owners = list(engine.live_owners()) if engine is not None else []
    if not owners:
        app.notice("No mods loaded" + (" (mods are off for this run)" if session is None else ""))
        return
    lines = ["Mods loaded:"]
    for owner in owners:
        spec = owner.spec
        lines.append(f"  {owner.name}  ({getattr(spec, 'source', '?')})  {getattr(spec, 'location', '')}")
    app.notice("\n".join(lines))


async def _skills(app: TetherApp, arg: str) -> None:
    catalog = app.prepared.services.skills
    if catalog is None or not catalog.enabled:
        app.notice("No skills: skills are off for this run")
        return
    skills = catalog.all()
    if not skills:
        app.notice("No skills found")
        return
    lines = ["Skills:"]
    for name, skill in skills.items():
        lines.append(f"  {name}  ({skill.source})  {skill.description[:80]}")
    app.notice("\n".join(lines))


async def _mcp(app: TetherApp, arg: str) -> None:
    servers = app.prepared.services.mcp
    if servers is None:
        app.notice("No MCP servers configured (mcpServers in settings, .mcp.json, --mcp-config; "
                   "`tether mcp add`)")
        return
    await app.prepared.start_tool_sources()
    lines = ["MCP servers:"]
    for state in servers.states.values():
        name = state.config.name
        line = f"  {name}  {state.status}"
        if state.error:
            line += f": {state.error}"
        lines.append(line)
        lines.extend(f"    mcp__{name}__{t.name}  {t.description[:70]}" for t in state.tools)
        lines.extend(f"    /mcp__{name}__{p}  (prompt)" for p in state.prompts)
    app.notice("\n".join(lines))


async def _mcp_prompt(app: TetherApp, name: str, arg: str) -> bool:
    """`/mcp__<server>__<prompt> [key=value ...]`: the server's prompt sent as this turn's
    message; False when no connected server offers it."""
    servers = app.prepared.services.mcp
    server, _, prompt = name[len("mcp__"):].partition("__")
    if servers is None or not prompt:
        return False
    await app.prepared.start_tool_sources()
    state = servers.states.get(server)
    if state is None or prompt not in state.prompts:
        return False
    arguments = dict(item.partition("=")[::2] for item in arg.split() if "=" in item)
    try:
        text = await servers.get_prompt(server, prompt, arguments)
    except Exception as exc:
        app.notice(f"/{name}: {exc}", "error")
        return True
    app.start_turn([text])  # runs now, or waits in the inbox for the running turn
    return True


async def _clear(app: TetherApp, arg: str) -> None:
    app.transcript.clear()
    app.notice("Screen cleared; the conversation continues (/new starts a fresh one)", "dim")


async def _exit(app: TetherApp, arg: str) -> None:
    await app.action_quit()


COMMANDS: dict[str, SlashCommand] = {
    c.name: c
    for c in (
        SlashCommand("help", "commands and keys", _help),
        SlashCommand("model", "switch the model for the next turns", _model, True, "[handle]"),
        SlashCommand("new", "start a new conversation with this agent", _new, True),
        SlashCommand("resume", "reopen another conversation of this agent", _resume, True, "[id]"),
        SlashCommand("agents", "list the agents on this machine", _agents),
        SlashCommand("compact", "summarise the conversation to free context", _compact, True),
        SlashCommand("memory", "show the agent's memory", _memory),
        SlashCommand("permissions", "show rules and mode; change the mode", _permissions, False, "[mode]"),
        SlashCommand("hooks", "list the configured hooks", _hooks),
        SlashCommand("mods", "list loaded mods", _mods),
        SlashCommand("skills", "list available skills", _skills),
        SlashCommand("mcp", "MCP servers: status, tools and prompts", _mcp),
        SlashCommand("clear", "clear the screen", _clear),
        SlashCommand("exit", "leave tether", _exit),
    )
}
ALIASES = {"quit": "exit", "q": "exit", "?": "help"}
