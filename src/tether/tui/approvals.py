"""The approval dialog for `ask` calls and `TuiApprover`, the `Approver` that shows it.

The dialog shows what would run (the Bash command, a unified diff for Write/Edit/MultiEdit, or
the arguments) and takes one key: y allow once, a allow always (adds the session rule it shows),
n deny (then an optional reason for the model), or arrows + enter; Esc denies and interrupts.
An AskUserQuestion call shows its questions instead, one at a time (enter picks an option, or
toggles one of a multi-select list until "Done"; "Other" takes a typed answer); the answers go
back to the tool as the approval's `updatedInput`, as the SDK's `can_use_tool` reply does.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

if TYPE_CHECKING:  # the permission engine loads with the session, after the first frame
    from tether.core.approvals import JudgedCall
    from tether.core.tools import ToolContext
    from tether.core.turn import ApprovalAnswer

DENIED = "The user denied this tool call."
_SUBCOMMAND = re.compile(r"^[a-z][a-z0-9._-]*$")
# Commands whose second word names what they do (`git status`, `npm test`): rules keep both.
_HAS_SUBCOMMANDS = frozenset({
    "apt", "apt-get", "brew", "bun", "cargo", "composer", "conda", "deno", "docker", "dotnet",
    "gh", "git", "go", "gradle", "helm", "kubectl", "make", "mvn", "npm", "pip", "pip3", "pnpm",
    "poetry", "podman", "rustup", "swift", "systemctl", "terraform", "uv", "yarn",
})


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    tool_name: str
    args: dict[str, Any]
    reason: str  # why the permission engine asks
    rules: tuple[str, ...]  # what "allow always" adds; () when no rule could cover the call
    why_no_rule: str = ""
    diffs: list[dict[str, Any]] | None = None

    @classmethod
    def of(cls, item: JudgedCall, cwd: Path, home: Path | None = None) -> ApprovalRequest:
        from tether.runtime.turns.diffs import preview_diffs

        name, args = item.call.name, dict(item.args)
        rules, why = suggest_rules(name, args, cwd, home or Path.home())
        return cls(name, args, item.decision.reason, rules, why, preview_diffs(name, args, cwd))


def suggest_rules(tool_name: str, args: dict[str, Any], cwd: Path, home: Path) -> tuple[tuple[str, ...], str]:
    """The session allow rules that would admit this call next time, or () and why none can.

    Bash gets one `Bash(<command> [<subcommand>]:*)` per simple command the shell would run (the
    checker admits a compound command only when every part matches); other tools, their name."""
    if not _is_bash(tool_name):
        return (tool_name,), ""
    command = args.get("command")
    if not isinstance(command, str) or not command.strip():
        return (), "the call has no command"
    from tether.core.permissions.shell import analyse

    analysis = analyse(command, cwd, home)
    if analysis.opaque:
        return (), f"tether cannot see everything this command runs ({analysis.opaque[0]})"
    rules: list[str] = []
    for simple in analysis.commands:
        if simple.role != "command":
            continue
        if simple.blocked:
            return (), f"no rule may admit it: {simple.blocked}"
        words = [w for w in simple.argv if w is not None]
        if not words or words[0] != simple.argv[0]:
            return (), "its command name is only known when it runs"
        prefix = words[:1]
        second = simple.argv[1] if len(simple.argv) > 1 else None
        if words[0] in _HAS_SUBCOMMANDS and second is not None and _SUBCOMMAND.match(second):
            prefix.append(second)
        rule = f"Bash({' '.join(prefix)}:*)"
        if rule not in rules:
            rules.append(rule)
    for redirect in analysis.redirects:  # a redirection needs a file rule of its own
        if redirect.target is None or redirect.cwd is None:
            return (), "it redirects to a file whose name is only known when it runs"
        target = os.path.normpath(redirect.cwd / redirect.target)
        if any(ch in target for ch in "*?[]"):
            return (), f"its redirection target {redirect.target!r} looks like a pattern"
        rule = f"{'Write' if redirect.write else 'Read'}(//{target.lstrip('/')})"
        if rule not in rules:
            rules.append(rule)
    if not rules:
        return (), "it runs no command a rule could name"
    return tuple(rules), ""


def _is_bash(tool_name: str) -> bool:
    from tether.core.permissions.rules import canonical_tool_name

    return canonical_tool_name(tool_name) == "Bash"


def diff_text(diffs: list[dict[str, Any]]) -> Text:
    """Unified diff lines for the previews `runtime.diffs.preview_diffs` computes."""
    out = Text()
    for d in diffs:
        out.append(f"--- {d.get('fileName', '')}\n+++ {d.get('fileName', '')}\n", style="bold")
        if d.get("mode") != "advanced":
            out.append(f"(no preview: {d.get('reason', 'unknown')})\n", style="yellow")
            continue
        hunks = d.get("hunks") or []
        if not hunks:
            out.append("(no changes)\n", style="dim")
        for h in hunks:
            out.append(
                f"@@ -{h['oldStart']},{h['oldLines']} +{h['newStart']},{h['newLines']} @@\n", style="cyan"
            )
            for line in h["lines"]:
                kind = line["type"]
                sign, style = {"add": ("+", "green"), "remove": ("-", "red")}.get(kind, (" ", ""))
                out.append(f"{sign}{line['content']}\n", style=style)
    out.rstrip()
    return out


def preview_text(request: ApprovalRequest) -> Text:
    args = request.args
    if _is_bash(request.tool_name):
        out = Text("$ ", style="bold")
        out.append(str(args.get("command", "")), style="bold")
        if args.get("description"):
            out.append(f"\n{args['description']}", style="dim")
        return out
    if request.diffs:
        return diff_text(request.diffs)
    return Text(json.dumps(args, indent=2, ensure_ascii=False))


@dataclass(frozen=True, slots=True)
class Choice:
    kind: str  # once | always | deny | interrupt | answer
    reason: str = ""
    answers: dict[str, Any] | None = None  # kind "answer": AskUserQuestion's answers


ASK_USER = "AskUserQuestion"
_OTHER, _DONE = "__other__", "__done__"


def questions_of(args: dict[str, Any]) -> list[dict[str, Any]]:
    """AskUserQuestion's questions, checked as the tool checks them; [] when malformed (the
    dialog then falls back to the plain approval, and the tool reports the problem)."""
    from tether.errors import ToolFailure
    from tether.tools.ask_user import parse_questions

    try:
        return parse_questions(args.get("questions"))
    except ToolFailure:
        return []


class ApprovalScreen(ModalScreen[Choice]):
    BINDINGS = [
        Binding("y", "choose('once')", "allow once", show=False),
        Binding("a", "choose('always')", "allow always", show=False),
        Binding("n", "choose('deny')", "deny", show=False),
        Binding("escape", "choose('interrupt')", "deny and interrupt", show=False),
        Binding("pageup", "scroll_preview(-1)", show=False),
        Binding("pagedown", "scroll_preview(1)", show=False),
    ]

    def __init__(self, request: ApprovalRequest) -> None:
        super().__init__(classes="approval")
        self.request = request
        self._asking_reason = False
        self.questions = questions_of(request.args) if request.tool_name == ASK_USER else []
        self._index = 0
        self.answers: dict[str, Any] = {}
        self._picked: list[str] = []  # a multi-select question's options chosen so far

    def compose(self) -> ComposeResult:
        r = self.request
        if self.questions:
            with Vertical(id="approval-box"):
                yield Static(id="question-title")
                yield OptionList(id="approval-options")
                yield Input(placeholder="your answer (enter sends)", id="approval-reason")
                yield Static(Text("↑↓ enter · esc skips the questions", style="dim"))
            return
        with Vertical(id="approval-box"):
            title = Text(f"{r.tool_name} needs your approval", style="bold")
            if r.reason:
                title.append(f"\n{r.reason}", style="dim")
            yield Static(title, id="approval-title")
            with VerticalScroll(id="approval-preview"):
                yield Static(preview_text(r))
            options = [Option("Yes, run it once  (y)", id="once")]
            if r.rules:
                label = Text("Yes, and allow for this session  (a)")
                for rule in r.rules:
                    label.append(f"\n    {rule}", style="bold")
                options.append(Option(label, id="always"))
            options.append(Option("No, and tell the model why  (n)", id="deny"))
            yield OptionList(*options, id="approval-options")
            if not r.rules and r.why_no_rule:
                yield Static(Text(f"No \"allow always\": {r.why_no_rule}", style="dim"))
            yield Input(placeholder="why not? (enter sends, empty for no reason)", id="approval-reason")
            yield Static(Text("↑↓ enter · y yes · a always · n no · esc interrupt", style="dim"))

    def on_mount(self) -> None:
        self.query_one("#approval-reason", Input).display = False
        self.query_one("#approval-options", OptionList).focus()
        if self.questions:
            self._show_question()

    def _show_question(self, highlight: int = 0) -> None:
        q = self.questions[self._index]
        title = Text(f"{q['header'] or 'Question'} ({self._index + 1}/{len(self.questions)})\n",
                     style="bold")  # fmt: skip
        title.append(q["question"])
        if q["multiSelect"]:
            title.append("\n(choose any; enter toggles, then Done)", style="dim")
        self.query_one("#question-title", Static).update(title)
        options = self.query_one("#approval-options", OptionList)
        options.clear_options()
        for index, option in enumerate(q["options"]):
            mark = ("[x] " if option["label"] in self._picked else "[ ] ") if q["multiSelect"] else ""
            label = Text(f"{mark}{option['label']}")
            if option["description"]:
                label.append(f"  {option['description']}", style="dim")
            options.add_option(Option(label, id=f"opt-{index}"))
        options.add_option(Option("Other: type an answer", id=_OTHER))
        if q["multiSelect"]:
            options.add_option(Option("Done", id=_DONE))
        options.highlighted = highlight  # rebuilt lists start unhighlighted: enter would do nothing

    def _answer(self, value: Any) -> None:
        self.answers[self.questions[self._index]["question"]] = value
        self._index += 1
        self._picked = []
        if self._index == len(self.questions):
            self.dismiss(Choice("answer", answers=self.answers))
            return
        self.query_one("#approval-reason", Input).display = False
        options = self.query_one("#approval-options", OptionList)
        options.display = True
        options.focus()
        self._show_question()

    def _question_option(self, option_id: str) -> None:
        q = self.questions[self._index]
        if option_id == _OTHER:
            self.query_one("#approval-options", OptionList).display = False
            box = self.query_one("#approval-reason", Input)
            box.display = True
            box.focus()
            return
        if option_id == _DONE:
            self._answer(list(self._picked))
            return
        label = q["options"][int(option_id.removeprefix("opt-"))]["label"]
        if not q["multiSelect"]:
            self._answer(label)
            return
        if label in self._picked:
            self._picked.remove(label)
        else:
            self._picked.append(label)
        self._show_question(self.query_one("#approval-options", OptionList).highlighted or 0)

    def action_scroll_preview(self, direction: int) -> None:
        preview = self.query_one("#approval-preview", VerticalScroll)
        (preview.scroll_page_down if direction > 0 else preview.scroll_page_up)()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if self.questions:
            self._question_option(event.option.id or _OTHER)
            return
        self.action_choose(event.option.id or "deny")

    def action_choose(self, kind: str) -> None:
        if self._asking_reason and kind != "interrupt":
            return  # the letters belong to the reason being typed
        if kind == "always" and not self.request.rules:
            self.notify("No session rule can cover this call; choose y or n", severity="warning")
            return
        if kind == "deny":
            self._asking_reason = True
            self.query_one("#approval-options", OptionList).display = False
            box = self.query_one("#approval-reason", Input)
            box.display = True
            box.focus()
            return
        self.dismiss(Choice(kind))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if self.questions:
            if event.value.strip():
                event.input.value = ""
                self._answer(event.value.strip())
            return
        self.dismiss(Choice("deny", event.value.strip()))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # While the reason (or an answer) is typed, y/a/n are text; only Esc still acts.
        typing = self._asking_reason or bool(self.questions)
        return not (typing and action == "choose" and parameters != ("interrupt",))


ShowDialog = Callable[[ApprovalRequest], "asyncio.Future[Choice]"]


def question_service(show: ShowDialog) -> Callable[[list[dict[str, Any]]], Any]:
    """`services.ask_user` for the TUI: AskUserQuestion's dialog when no approval carried the
    answers (a mode that allowed the call without asking); None when the user skipped it."""

    async def ask(questions: list[dict[str, Any]]) -> dict[str, Any] | None:
        choice = await show(ApprovalRequest(ASK_USER, {"questions": questions}, "", ()))
        return choice.answers if choice.kind == "answer" else None

    return ask


class TuiApprover:
    """Answers `ask` with the dialog; "allow always" adds the shown rules for the session."""

    def __init__(
        self,
        show: ShowDialog,
        add_session_rule: Callable[[str], None],
        note: Callable[[str], None],
        home: Path | None = None,
    ) -> None:
        self.show = show
        self.add_session_rule = add_session_rule
        self.note = note
        self.home = home
        self.pending: asyncio.Future[Choice] | None = None

    async def ask(self, item: JudgedCall, ctx: ToolContext) -> ApprovalAnswer:
        from tether.core.turn import ApprovalAnswer

        request = ApprovalRequest.of(item, ctx.cwd, self.home)
        self.pending = self.show(request)
        try:
            choice = await self.pending
        finally:
            self.pending = None
        if choice.kind == "once":
            return ApprovalAnswer(True)
        if choice.kind == "answer":  # AskUserQuestion: the answers ride on the approval
            return ApprovalAnswer(True, updated_input={**item.args, "answers": choice.answers or {}})
        if choice.kind == "always":
            for rule in request.rules:
                self.add_session_rule(rule)
            self.note(f"Allowed for this session: {', '.join(request.rules)}")
            return ApprovalAnswer(True)
        if choice.kind == "interrupt":
            return ApprovalAnswer(False, "The user interrupted the turn.", interrupt=True)
        message = f"{DENIED} The user said: {choice.reason}" if choice.reason else DENIED
        return ApprovalAnswer(False, message)

    def cancel(self) -> None:
        """Answer an open dialog with "interrupt" (the turn is being stopped)."""
        if self.pending is not None and not self.pending.done():
            self.pending.set_result(Choice("interrupt"))
