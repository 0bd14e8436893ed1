"""The transcript's blocks (user, assistant, reasoning, tool call, notice), the status line and
the prompt box, and `Transcript.render_event`, which turns the turn engine's events into them.

The events are the ones the headless renderer consumes (`tether.core.turn.Event`); a reopened
conversation is drawn from its stored messages through the same blocks.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import events
from textual.containers import Vertical, VerticalScroll
from textual.message import Message as TextualMessage
from textual.widgets import Collapsible, Markdown, Static, TextArea

from tether.protocol.chunks import (
    AssistantText,
    CompactionNotice,
    ErrorChunk,
    Reasoning,
    RetryNotice,
    SummaryMessage,
    UsageStatistics,
)
from tether.protocol.messages import (
    AssistantMessage,
    Message,
    TextPart,
    ThinkingPart,
    ToolResultMessage,
    UserMessage,
)
from tether.protocol.tool_calls import ToolCall, ToolReturn
from tether.protocol.turns import LocalToolCall, LocalToolReturn, TurnError

if TYPE_CHECKING:
    from tether.core.turn import Event

FOLD_LINES = 8  # tool output beyond this many lines is folded
HISTORY_LIMIT = 80  # messages drawn when a conversation is reopened

_SUMMARY_KEY = {
    "Bash": "command",
    "Read": "file_path",
    "Write": "file_path",
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "Glob": "pattern",
    "Grep": "pattern",
    "LS": "path",
    "Agent": "description",
    "Task": "description",
}


def tool_summary(name: str, args: dict[str, Any]) -> tuple[str, str]:
    """(headline, details): the argument that says what the call does, then the rest, short."""
    key = _SUMMARY_KEY.get(name)
    head = str(args.get(key, "")) if key else ""
    rest: list[str] = []
    for k, v in args.items():
        if k == key:
            continue
        if isinstance(v, str) and "\n" in v:
            shown = f"<{len(v.splitlines())} lines>"
        else:
            shown = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
            if len(shown) > 120:
                shown = shown[:117] + "..."
        rest.append(f"{k}: {shown}")
    if not key and not head and rest:
        head, rest = rest[0], rest[1:]
    return head, "\n".join(rest)


def shown_args(call: ToolCall) -> dict[str, Any]:
    """What a tool block shows: the parsed arguments, or the model's text when it was unusable."""
    if call.error is None or not call.text.strip():
        return dict(call.arguments)
    return {"arguments": call.text}


# --- blocks ------------------------------------------------------------------------------------


class UserBlock(Static):
    def __init__(self, text: str) -> None:
        body = Text("> ", style="bold cyan")
        body.append(text)
        super().__init__(body, classes="user")


class AssistantBlock(Markdown):
    """Assistant text as Markdown; streamed pieces are batched so rendering keeps up."""

    def __init__(self, otid: str | None = None, text: str = "") -> None:
        super().__init__(text, classes="assistant")
        self.otid = otid
        self.text = text
        self._pending: list[str] = []
        self._wake = asyncio.Event()

    def on_mount(self) -> None:
        self.run_worker(self._pump(), exclusive=True, exit_on_error=False)

    def feed(self, piece: str) -> None:
        self.text += piece
        self._pending.append(piece)
        self._wake.set()

    async def _pump(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            piece = "".join(self._pending)
            self._pending.clear()
            if piece:
                await self.append(piece)


class ReasoningBlock(Collapsible):
    def __init__(self, otid: str | None = None, text: str = "") -> None:
        self.otid = otid
        self.text = text
        self._body = Static(Text(text, style="italic"), classes="reasoning-body")
        super().__init__(self._body, title=self._headline(), collapsed=True, classes="reasoning")

    def _headline(self) -> str:
        first = next((line for line in self.text.splitlines() if line.strip()), "")
        return f"Thinking  {first[:60]}" if first else "Thinking"

    def feed(self, piece: str) -> None:
        self.text += piece
        self._body.update(Text(self.text, style="italic"))
        self.title = self._headline()


class ToolBlock(Vertical):
    """One tool call: what it was asked to do, then its result (long output folded)."""

    def __init__(self, tool_call_id: str, name: str, args: dict[str, Any]) -> None:
        super().__init__(classes="tool")
        self.tool_call_id = tool_call_id
        self.tool_name = name
        self.args = args
        self.result: ToolReturn | None = None

    def compose(self) -> Iterable[Static]:
        head, details = tool_summary(self.tool_name, self.args)
        line = Text("● ", style="bold magenta")
        line.append(self.tool_name, style="bold")
        if head:
            line.append("  " + head.splitlines()[0])
            if "\n" in head:
                line.append(f"  (+{len(head.splitlines()) - 1} lines)", style="dim")
        yield Static(line, classes="tool-head")
        if details:
            yield Static(Text(details, style="dim"), classes="tool-args")

    def set_result(self, result: ToolReturn) -> None:
        self.result = result
        self.add_class("done")
        if result.denied:
            self.add_class("denied")
            self.mount(Static(Text(f"  ✗ Denied: {result.output}", style="yellow"), classes="tool-result"))
            return
        style = "red" if result.is_error else ""
        lines = result.output.splitlines() or ["(no output)"]
        shown = Text("\n".join("  ⎿ " + line if n == 0 else "    " + line for n, line in enumerate(lines[:FOLD_LINES])), style=style)
        self.mount(Static(shown, classes="tool-result"))
        if len(lines) > FOLD_LINES:
            rest = Static(Text("\n".join(lines[FOLD_LINES:]), style=style), classes="tool-more-body")
            self.mount(Collapsible(rest, title=f"{len(lines) - FOLD_LINES} more lines", collapsed=True, classes="tool-more"))


class Notice(Static):
    """A line from the harness: an error, a retry, an interruption, a command's answer."""

    def __init__(self, text: str | Text, kind: str = "info") -> None:
        super().__init__(text if isinstance(text, Text) else Text(text), classes=f"notice {kind}")
        self.kind = kind


# --- status line -------------------------------------------------------------------------------


@dataclass(slots=True)
class StatusInfo:
    model: str = ""
    agent: str = ""
    conversation: str = ""
    mode: str = ""
    context_tokens: int = 0
    background: int = 0
    queued: int = 0
    busy: bool = False
    hint: str = ""


def _short_agent(agent_id: str) -> str:
    return agent_id[:20] + "…" if len(agent_id) > 21 else agent_id


def format_status(info: StatusInfo) -> Text:
    out = Text()
    if info.hint:  # first, so a narrow terminal wraps the details, not the hint
        out.append(info.hint + "  ", style="bold yellow")
    out.append("● working  " if info.busy else "○ ready  ", style="bold green" if info.busy else "dim")
    parts = [
        ("", info.model),
        ("", _short_agent(info.agent)),
        ("", info.conversation),
        ("mode ", info.mode),
        ("ctx ", f"{info.context_tokens:,} tok"),
        ("bg ", str(info.background)),
    ]
    if info.queued:
        parts.append(("queued ", str(info.queued)))
    for n, (label, value) in enumerate(parts):
        if n:
            out.append(" · ", style="dim")
        out.append(label, style="dim")
        out.append(value)
    return out


class StatusLine(Static):
    def show(self, info: StatusInfo) -> None:
        self.update(format_status(info))


# --- prompt box --------------------------------------------------------------------------------


class PromptInput(TextArea):
    """Enter submits; shift+enter or ctrl+j starts a new line; up/down walk the prompt history
    when the cursor is on the first/last line; pasted text (newlines too) is inserted as is."""

    class Submitted(TextualMessage):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    def __init__(self, history: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(soft_wrap=True, show_line_numbers=False, compact=True, **kwargs)
        self.prompt_history: list[str] = list(history or [])
        self._cursor: int | None = None  # index into history while browsing
        self._draft = ""

    async def _on_key(self, event: events.Key) -> None:
        # Handled here, not as (priority) bindings: a binding would run ahead of the letters
        # still queued for this widget, submitting half a prompt typed quickly.
        if event.key in ("enter", "shift+enter", "ctrl+j"):
            event.stop()
            event.prevent_default()
            if event.key == "enter":
                self.action_submit()
            else:
                self.action_newline()
            return
        await super()._on_key(event)

    def action_submit(self) -> None:
        text = self.text
        if not text.strip():
            return
        if not self.prompt_history or self.prompt_history[-1] != text:
            self.prompt_history.append(text)
        self._cursor = None
        self.clear()
        self.post_message(self.Submitted(text))

    def action_newline(self) -> None:
        self.insert("\n")

    def action_cursor_up(self, select: bool = False) -> None:
        if not select and self.cursor_location[0] == 0 and self.prompt_history:
            if self._cursor is None:
                self._draft, self._cursor = self.text, len(self.prompt_history)
            if self._cursor > 0:
                self._cursor -= 1
                self._load(self.prompt_history[self._cursor], at_end=False)
            return
        super().action_cursor_up(select)

    def action_cursor_down(self, select: bool = False) -> None:
        last_row = self.document.line_count - 1
        if not select and self._cursor is not None and self.cursor_location[0] == last_row:
            self._cursor += 1
            if self._cursor >= len(self.prompt_history):
                self._cursor = None
                self._load(self._draft, at_end=True)
            else:
                self._load(self.prompt_history[self._cursor], at_end=True)
            return
        super().action_cursor_down(select)

    def _load(self, text: str, *, at_end: bool) -> None:
        self.load_text(text)
        if at_end:
            self.move_cursor(self.document.end)
        else:
            self.move_cursor((0, len(self.document.get_line(0))))


# --- the transcript ----------------------------------------------------------------------------


class Transcript(VerticalScroll):
    """The conversation so far; `render_event` appends what the running turn emits."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._text: AssistantBlock | None = None
        self._reasoning: ReasoningBlock | None = None
        self._tools: dict[str, ToolBlock] = {}
        self._shown_errors: set[str] = set()
        self.last_usage: UsageStatistics | None = None

    def on_mount(self) -> None:
        self.anchor()

    def _add(self, widget: Any) -> None:
        self.mount(widget)
        self.anchor()

    def add_user(self, text: str) -> None:
        self._end_runs()
        self._add(UserBlock(text))

    def notice(self, text: str | Text, kind: str = "info") -> Notice:
        self._end_runs()
        block = Notice(text, kind)
        self._add(block)
        return block

    def clear(self) -> None:
        self._end_runs()
        self._tools.clear()
        self.remove_children()

    def _end_runs(self) -> None:
        self._text = None
        self._reasoning = None

    def plain_text(self) -> str:
        """Everything drawn, as text (tests and `/copy`-like uses)."""
        out: list[str] = []
        for child in self.query("UserBlock, AssistantBlock, ReasoningBlock, ToolBlock, Notice"):
            if isinstance(child, AssistantBlock | ReasoningBlock):
                out.append(child.text)
            elif isinstance(child, ToolBlock):
                head, _ = tool_summary(child.tool_name, child.args)
                out.append(f"{child.tool_name} {head}")
                if child.result is not None:
                    out.append(child.result.output)
            elif isinstance(child, Static):
                out.append(str(child.render()))
        return "\n".join(out)

    # --- live events ---------------------------------------------------------------------------

    def render_event(self, event: Event) -> None:
        if isinstance(event, AssistantText):
            if self._text is None or self._text.otid != event.otid:
                self._reasoning = None
                self._text = AssistantBlock(event.otid)
                self._add(self._text)
            self._text.feed(event.content)
        elif isinstance(event, Reasoning):
            if self._reasoning is None or self._reasoning.otid != event.otid:
                self._text = None
                self._reasoning = ReasoningBlock(event.otid)
                self._add(self._reasoning)
            self._reasoning.feed(event.reasoning)
        elif isinstance(event, UsageStatistics):
            self.last_usage = event
        elif isinstance(event, RetryNotice):
            self.notice(
                f"↻ {event.message} — retrying (attempt {event.attempt}/{event.max_attempts}) "
                f"in {event.delay_ms / 1000:.1f}s",
                "retry",
            )
        elif isinstance(event, ErrorChunk):
            self._shown_errors.add(event.message)
            detail = f"\n{event.detail}" if event.detail else ""
            self.notice(f"✗ {event.message}{detail}", "error")
        elif isinstance(event, CompactionNotice):
            stats = ", ".join(f"{k} {v}" for k, v in event.stats.items())
            self.notice(f"⇣ Conversation compacted ({event.trigger}){': ' + stats if stats else ''}", "dim")
        elif isinstance(event, SummaryMessage):
            self._end_runs()
            summary = Static(Text(event.summary, style="italic"), classes="reasoning-body")
            self._add(Collapsible(summary, title="Summary of the earlier conversation", collapsed=True, classes="reasoning"))
        elif isinstance(event, LocalToolCall):
            self._end_runs()
            block = ToolBlock(event.tool_call_id, event.name, shown_args(event.call))
            self._tools[event.tool_call_id] = block
            self._add(block)
        elif isinstance(event, LocalToolReturn):
            self._tool_result(event.result)
        elif isinstance(event, TurnError):
            if event.message in self._shown_errors:
                return
            if event.stop_reason == "cancelled":  # the engine says "SIGINT" for every interrupt
                why = "" if "SIGINT" in event.message else f" ({event.message})"
                self.notice(f"⏹ Interrupted{why}", "interrupted")
            else:
                self.notice("✗ " + event.message, "error")
        # ToolCallRequest (shown once it is answered, as LocalToolCall) and StopReason: nothing

    def _tool_result(self, result: ToolReturn) -> None:
        block = self._tools.get(result.tool_call_id)
        if block is None:
            block = ToolBlock(result.tool_call_id, result.tool_name, {})
            self._tools[result.tool_call_id] = block
            self._add(block)
        if block.is_mounted:
            block.set_result(result)
        else:
            self.call_after_refresh(block.set_result, result)
        self.anchor()

    # --- a reopened conversation ---------------------------------------------------------------

    def show_history(self, messages: list[Message], limit: int = HISTORY_LIMIT) -> None:
        if len(messages) > limit:
            self.notice(f"… {len(messages) - limit} earlier messages not shown", "dim")
            messages = messages[-limit:]
        blocks: list[Any] = []
        results: list[ToolResultMessage] = []
        for m in messages:
            if isinstance(m, UserMessage):
                text = "\n".join(p.text for p in m.content if isinstance(p, TextPart))
                blocks.append(UserBlock(text or "(image)"))
            elif isinstance(m, AssistantMessage):
                for part in m.content:
                    if isinstance(part, TextPart) and part.text.strip():
                        blocks.append(AssistantBlock(None, part.text))
                    elif isinstance(part, ThinkingPart) and part.thinking.strip():
                        blocks.append(ReasoningBlock(None, part.thinking))
                    elif isinstance(part, ToolCall):
                        block = ToolBlock(part.id, part.name, dict(part.arguments))
                        self._tools[part.id] = block
                        blocks.append(block)
            elif isinstance(m, ToolResultMessage):
                results.append(m)
        if blocks:
            self.mount_all(blocks)

        def attach() -> None:
            for r in results:  # a stored denial is an error result: drawn as one
                self._tool_result(ToolReturn(r.tool_call_id, r.tool_name, r.text, r.is_error))

        self.call_after_refresh(attach)
        self.anchor()
