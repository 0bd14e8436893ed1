"""`tether` with no prompt: the Textual app that drives turns on the same runtime as headless.

`run_tui(flags)` draws the first frame, then resolves the session with `prepare` in a thread (an
error there closes the screen, prints `Error: …` and exits 1); `TetherApp` then submits each
prompt to the conversation's inbox (`runtime/turns/inbox.py`) and is its frontend: it renders the same
events the headless renderer consumes and answers approvals with a `TuiApprover`. Prompts typed
during a turn wait in the inbox and share the next turn; Esc interrupts (the engine kills the
tool's process group and answers every call; waiting prompts go back into the input box);
Ctrl-C twice exits cleanly. The TUI-only hooks run here: SessionStart, UserPromptSubmit, Stop
(its feedback runs next, ahead of waiting prompts) and SessionEnd.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import sys
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.screen import ModalScreen
from textual.widgets import Static

from tether.errors import TetherError
from tether.protocol.messages import TextPart
from tether.runtime.extensions.turn_hooks import HookOutcome, TurnHooks
from tether.runtime.session.flags import RunFlags
from tether.tui.approvals import ApprovalRequest, ApprovalScreen, Choice, TuiApprover
from tether.tui.commands import PickerScreen, parse_command, run_command
from tether.tui.styles import STYLESHEET
from tether.tui.turns import PromptQueue, TuiTurns
from tether.tui.widgets import PromptInput, StatusInfo, StatusLine, Transcript

if TYPE_CHECKING:  # the runtime loads in a thread once the first frame is up
    from tether.runtime.session.prepared import Prepared
    from tether.runtime.turns.inbox import Inbox

DOUBLE_PRESS_S = 2.0
MODE_CYCLE = ("standard", "acceptEdits", "plan", "strict")
HISTORY_KEEP = 500


def run_tui(flags: RunFlags, *, setup_done: bool = False) -> int:
    """Draw first, then resolve the session (`prepare`) in a thread; its errors exit 1. With no
    provider configured at all, the first-run screen (`tui/setup.py`) asks for one first."""
    app = TetherApp(flags=flags, initial_prompt=flags.prompt)
    code = app.run()
    from tether.runtime.session.session import NO_MODEL

    if app.startup_error == NO_MODEL and not setup_done:
        from tether.tui.setup import run_setup

        if run_setup() is not None:  # stored as `tether connect` does: open the session now
            return run_tui(flags, setup_done=True)
    for message in (app.startup_error, app.crashed_turn):
        if message:
            sys.stderr.write(f"Error: {message}\n")
    if app.exit_signal is not None:
        import signal

        with contextlib.suppress(OSError, ValueError):  # the terminal may be gone already
            sys.stderr.write(f"Interrupted by {signal.Signals(app.exit_signal).name}\n")
        return 128 + app.exit_signal
    if app.startup_error:
        return 1
    return code if isinstance(code, int) else 1


class TetherApp(App[int]):
    CSS = STYLESHEET
    BINDINGS = [
        Binding("ctrl+c", "ctrl_c", "interrupt / exit", show=False, priority=True),
        Binding("ctrl+q", "quit", "exit", show=False, priority=True),
        Binding("escape", "interrupt", "interrupt", show=False),
        Binding("shift+tab", "cycle_mode", "permission mode", show=False, priority=True),
    ]
    ENABLE_COMMAND_PALETTE = False

    def __init__(
        self, prepared: Prepared | None = None, *, flags: RunFlags | None = None,
        initial_prompt: str | None = None,
    ) -> None:
        super().__init__()
        if prepared is not None:
            flags = prepared.flags
        if flags is None:
            raise ValueError("TetherApp needs a prepared session or the flags to prepare one")
        self._prepared = prepared
        self._inbox: Inbox | None = None  # the conversation's turns; made for the ready session
        self.flags = flags
        self.initial_prompt = initial_prompt
        self.early_prompts: list[str] = []  # typed while the session was starting
        self.turns = TuiTurns(self)  # the inbox's frontend
        self.queue = PromptQueue(self)
        self.context_tokens = 0
        self.startup_error: str | None = None
        self.exit_signal: int | None = None  # SIGHUP/SIGTERM that ended the session
        self.crashed_turn: str | None = None
        self.first_frame_at: float | None = None
        self._preparing: asyncio.Task[None] | None = None
        self._ctrl_c_at = 0.0
        self._hint = ""
        self._quitting = False
        self._wound_down = False
        self._ui_alive = True  # False once the widgets are gone (late events are dropped)
        self._session_context: list[TextPart] = []  # SessionStart output, sent with the first prompt
        self._tasks: set[asyncio.Task[Any]] = set()
        self.approver = TuiApprover(
            self._show_approval, lambda rule: self.prepared.add_session_rule(rule), self._rule_added,
            Path(os.environ.get("HOME") or Path.home()),
        )

    @property
    def prepared(self) -> Prepared:
        if self._prepared is None:
            raise TetherError("the session is still starting")
        return self._prepared

    @property
    def ready(self) -> bool:
        return self._prepared is not None

    @property
    def inbox(self) -> Inbox:
        """The conversation's inbox, this app its frontend; made once the session is ready."""
        if self._inbox is None:
            from tether.runtime.turns.inbox import Inbox

            self._inbox = Inbox(self.prepared, self.turns, coalesce=True)  # waiting prompts share a turn
        return self._inbox

    @property
    def inbox_if_made(self) -> Inbox | None:
        return self._inbox

    @property
    def quitting(self) -> bool:
        return self._quitting

    @property
    def ui_alive(self) -> bool:
        """False once the widgets are gone (late events are dropped)."""
        return self._ui_alive

    def take_session_context(self) -> list[TextPart]:
        """SessionStart's output, sent once, with the first prompt."""
        context, self._session_context = self._session_context, []
        return context

    @property
    def _history_file(self) -> Path:
        return self.prepared.store.home / "state" / "prompt-history.jsonl"

    # --- layout and status ---------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Transcript(id="transcript")
        yield Static(id="queue")
        yield PromptInput(id="prompt", placeholder="Ask tether… (/help for commands)")
        yield StatusLine(id="status")

    @property
    def transcript(self) -> Transcript:
        return self.query_one(Transcript)

    @property
    def prompt_box(self) -> PromptInput:
        return self.query_one(PromptInput)

    @property
    def busy(self) -> bool:
        """A turn is running or waiting, or the session is still starting: prompts wait."""
        inbox = self._inbox
        return not self.ready or (inbox is not None and (inbox.busy or bool(inbox.queue)))

    def on_mount(self) -> None:
        self._on_terminal_signals()
        self.prompt_box.focus()
        self.refresh_status()
        self.set_interval(1.0, self.refresh_status)
        self.call_after_refresh(self._after_first_frame)

    def _after_first_frame(self) -> None:
        self.first_frame_at = time.monotonic()
        if self.ready:
            self._session_ready()
        else:
            self._preparing = asyncio.ensure_future(self._prepare_session())

    async def _prepare_session(self) -> None:
        captured = io.StringIO()

        def work() -> Prepared:
            from tether.tui.sessions import apply_resume

            # what start-up reports (ignored settings…) is shown as notices, not over the screen
            with contextlib.redirect_stderr(captured):
                if self.flags.resume and not apply_resume(self.flags):
                    print("tether: nothing to resume yet; this is a new conversation", file=sys.stderr)
                prepared = prepare_here(self.flags, captured)
                from tether.runtime.updater import startup_check

                startup_check(prepared.env, prepared.store.home)  # the daily update check
                return prepared

        try:
            self._prepared = await asyncio.to_thread(work)
        except Exception as exc:
            self.startup_error = str(exc) if isinstance(exc, TetherError) else f"{type(exc).__name__}: {exc}"
            self.exit(1)
            return
        for line in captured.getvalue().splitlines():
            if line.strip():
                self.notice(line, "dim")
        if self._quitting:
            return
        self._session_ready()

    def _answer_questions_here(self) -> None:
        """AskUserQuestion allowed without an approval dialog (a mode that asks nothing) still
        reaches the user: the session's `ask_user` service shows the question dialog."""
        from tether.tui.approvals import question_service

        self.prepared.services.ask_user = question_service(self._show_approval)

    def _session_ready(self) -> None:
        self._answer_questions_here()
        if self.prepared.flags.permission_mode == "plan":  # started (or cycled early) into plan mode
            from tether.runtime.turns.plan_mode import enter_plan_mode

            enter_plan_mode(self.prepared)
        self.prompt_box.prompt_history[:0] = self._read_history()
        s = self.prepared.session
        self.notice(
            f"tether · agent {s.agent.id} · conversation {s.conversation_id} · model {s.model}\n"
            "/help for commands · esc interrupts · ctrl-c twice exits",
            "dim",
        )
        from tether.tui.sessions import history

        try:
            messages = history(self.prepared)
        except TetherError as exc:
            messages = []
            self.notice(f"Could not read this conversation's history: {exc}", "error")
        if messages:
            self.transcript.show_history(messages)
        self.refresh_status()
        self.spawn(self._session_start(is_new=not messages))
        if self.prepared.services.mcp is not None:
            self.spawn(self._report_failed_servers())
        if self.prepared.settings.ignored and not self.flags.trust:
            self.spawn(self.offer_trust())

    async def _report_failed_servers(self) -> None:
        """MCP servers start in the background; one that does not start is said on screen."""
        for server in await self.prepared.start_tool_sources():
            if server.get("status") == "failed":
                self.notice(f"MCP server {server.get('name')!r} failed to start: "
                            f"{server.get('error') or 'no reason given'} (/mcp for details)", "error")

    async def offer_trust(self) -> bool:
        """The interactive side of folder trust: the project's settings asked for more than an
        untrusted folder gets (allow rules, hooks, mods…); ask once, and on yes record the trust
        (bound to the files' content) and rebuild the session so they apply."""
        p = self.prepared
        asked = "; ".join(m.split(" (run `tether trust`")[0] for m in p.settings.ignored)
        choice = await self.pick(
            f"Trust {p.cwd}? Its project settings were not applied: {asked}",
            [("trust", "Trust this folder: apply its allow rules, hooks and mods"),
             ("skip", "Not now: only its deny and ask rules apply")],
        )
        if choice != "trust":
            self.notice("Folder not trusted: its widening settings stay off (`tether trust` later).", "dim")
            return False
        from tether.runtime.policy.trust import TrustStore

        TrustStore(p.store.home).trust(p.cwd)
        self.flags.agent, self.flags.conversation = p.session.agent.id, p.session.conversation_id
        self.flags.new_agent = self.flags.new_conversation = False
        notes = io.StringIO()
        fresh = await asyncio.to_thread(prepare_here, self.flags, notes)
        for line in notes.getvalue().splitlines():
            self.notice(line, "dim")
        old, self._prepared = p, fresh
        if self._inbox is not None:
            self._inbox.rebind(fresh)
        self._answer_questions_here()
        await old.shutdown()
        self.notice(f"Trusted {p.cwd}: its project settings now apply.", "info")
        self.refresh_status()
        return True

    def refresh_status(self) -> None:
        if not self._ui_alive:
            return
        p = self._prepared
        if p is None:
            info = StatusInfo(model=self.flags.model or "", agent="starting…", mode=self.flags.permission_mode,
                              queued=len(self.queue), busy=True, hint=self._hint)
        else:
            background = p.services.background
            info = StatusInfo(
                model=p.session.model,
                agent=p.session.agent.id,
                conversation=p.session.conversation_id,
                mode=p.flags.permission_mode,
                context_tokens=self.context_tokens,
                background=background.running_count if background is not None else 0,
                queued=len(self.queue),
                busy=self.busy,
                hint=self._hint,
            )
        try:
            status, queue = self.query_one(StatusLine), self.query_one("#queue", Static)
        except NoMatches:  # shutting down: the widgets went before on_unmount; the 1 s timer did not
            return
        status.show(info)
        queue.update(Text("\n".join(f"⏳ queued: {q}" for q in self.queue)) if self.queue else "")
        queue.display = bool(self.queue)

    def notice(self, text: str | Text, kind: str = "info") -> None:
        if self._ui_alive:
            self.transcript.notice(text, kind)

    def _set_hint(self, hint: str, seconds: float = DOUBLE_PRESS_S) -> None:
        self._hint = hint
        self.refresh_status()

        def clear() -> None:
            if self._hint == hint:
                self._hint = ""
                self.refresh_status()

        self.set_timer(seconds, clear)

    # --- prompt history (one JSON string a line) -----------------------------------------------

    def _read_history(self) -> list[str]:
        try:
            lines = self._history_file.read_bytes().splitlines()[-HISTORY_KEEP:]
        except OSError:
            return []
        out: list[str] = []
        for line in lines:
            with contextlib.suppress(orjson.JSONDecodeError):
                value = orjson.loads(line)
                if isinstance(value, str):
                    out.append(value)
        return out

    def _remember(self, text: str) -> None:
        with contextlib.suppress(OSError):
            self._history_file.parent.mkdir(parents=True, exist_ok=True)
            with self._history_file.open("ab") as f:
                f.write(orjson.dumps(text) + b"\n")

    # --- input ---------------------------------------------------------------------------------

    def on_prompt_input_submitted(self, message: PromptInput.Submitted) -> None:
        text = message.text
        if self.ready:
            self._remember(text)
        command = parse_command(text)
        if command is not None and not self.ready and command[0] not in ("exit", "quit", "q"):
            self.notice(f"/{command[0]}: the session is still starting; try again in a moment", "dim")
        elif command is not None:
            self.spawn(run_command(self, *command))
        else:
            self.start_turn([text])  # runs now, or waits for the running turn

    def start_turn(self, prompts: list[str]) -> None:
        """Submit `prompts` (they share one turn); before the session is ready they wait here."""
        if not self.ready:
            self.early_prompts.extend(prompts)
        else:
            from tether.runtime.turns.inbox import Submission

            for text in prompts:
                self.inbox.put(Submission(parts=(TextPart(text),), payload=text))
        self.refresh_status()

    def spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(self._guard(coro))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _guard(self, coro: Awaitable[Any]) -> None:
        try:
            await coro
        except TetherError as exc:
            self.notice(str(exc), "error")
        except Exception as exc:  # a bug must show, not kill the session
            self.notice(f"Internal error: {type(exc).__name__}: {exc}", "error")

    # --- turns ---------------------------------------------------------------------------------

    # --- TUI-only hooks ------------------------------------------------------------------------

    def show(self, outcome: HookOutcome) -> HookOutcome:
        for text, kind in outcome.notices:
            self.notice(text, kind)
        return outcome

    async def _session_start(self, *, is_new: bool) -> None:
        hooks = TurnHooks(self.prepared.hooks)
        started = self.show(await hooks.session_start(is_new=is_new, agent_name=self.prepared.session.agent.name))
        self._session_context = started.context
        first = [self.initial_prompt] if self.initial_prompt else []
        self.initial_prompt = None
        waiting, self.early_prompts = [*first, *self.early_prompts], []  # typed while the session was starting
        if waiting and not self._quitting:
            self.start_turn(waiting)

    # --- dialogs -------------------------------------------------------------------------------

    def _show_approval(self, request: ApprovalRequest) -> asyncio.Future[Choice]:
        future: asyncio.Future[Choice] = asyncio.get_running_loop().create_future()
        screen = ApprovalScreen(request)

        def answered(choice: Choice | None) -> None:
            if not future.done():
                future.set_result(choice or Choice("interrupt"))

        def settled(_: asyncio.Future[Choice]) -> None:
            # Answered from outside (interrupt, exit): close the dialog if it is still up.
            if self._ui_alive and screen.is_attached and self.screen_stack[-1:] == [screen]:
                screen.dismiss(None)

        future.add_done_callback(settled)
        self.push_screen(screen, callback=answered)
        return future

    def _rule_added(self, text: str) -> None:
        self.notice(text, "dim")

    async def pick(self, title: str, options: list[tuple[str, str]]) -> str | None:
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()

        def chosen(value: str | None) -> None:
            if not future.done():
                future.set_result(value)

        self.push_screen(PickerScreen(title, options), callback=chosen)
        return await future

    async def open_conversation(self, conversation_id: str) -> None:
        from tether.tui.sessions import history, switch_conversation

        switch_conversation(self.prepared, conversation_id)
        self.transcript.clear()
        self.context_tokens = 0
        self.notice(f"Resumed conversation {conversation_id}", "dim")
        messages = history(self.prepared)
        self.transcript.show_history(messages)
        self.refresh_status()

    # --- keys ----------------------------------------------------------------------------------

    def action_interrupt(self) -> None:
        inbox = self._inbox
        if inbox is not None and inbox.turn_running and not inbox.aborting:
            inbox.abort()
            self.approver.cancel()
            self._set_hint("interrupting…")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # In a dialog shift+tab moves focus as usual; the mode only cycles on the main screen.
        return not (action == "cycle_mode" and isinstance(self.screen, ModalScreen))

    def action_cycle_mode(self) -> None:
        flags = self.flags
        current = flags.permission_mode
        nxt = MODE_CYCLE[(MODE_CYCLE.index(current) + 1) % len(MODE_CYCLE)] if current in MODE_CYCLE else MODE_CYCLE[0]
        if self.ready:
            from tether.runtime.turns.plan_mode import set_mode

            set_mode(self.prepared, nxt)  # plan mode offers ExitPlanMode
        else:
            flags.permission_mode = nxt
        self._set_hint(f"permission mode: {nxt}")

    async def action_ctrl_c(self) -> None:
        now = time.monotonic()
        if now - self._ctrl_c_at < DOUBLE_PRESS_S:
            await self.action_quit()
            return
        self._ctrl_c_at = now
        if self.busy:
            self.action_interrupt()
        elif self.prompt_box.text:
            self.prompt_box.clear()
        self._set_hint("press Ctrl-C again to exit")

    async def action_quit(self) -> None:
        """Stop the running turn (its calls get answers on disk), stop background work, exit."""
        self._quitting = True
        await self._wind_down()
        self.exit(0)

    def _on_terminal_signals(self) -> None:
        """SIGHUP (the terminal closed) and SIGTERM end the session like a quit — the running
        turn is interrupted, its tool's process group stopped and every call answered on disk —
        and the process exits 128+N, never like `kill -9`."""
        import signal

        loop = asyncio.get_running_loop()

        def stop(signum: int) -> None:
            self.exit_signal = signum
            self.spawn(self._quit_on_signal(signum))

        for signum in (signal.SIGHUP, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(signum, stop, signum)

    async def _quit_on_signal(self, signum: int) -> None:
        self._quitting = True
        await self._wind_down()
        self.exit(128 + signum)

    async def on_unmount(self) -> None:
        # Any other way out (an error, the test harness) still settles the turn and stops tasks.
        self._ui_alive = False
        self._quitting = True
        await self._wind_down()

    async def _wind_down(self) -> None:
        if self._wound_down:
            return
        self._wound_down = True
        self.early_prompts.clear()
        if self._preparing is not None and not self._preparing.done():
            with contextlib.suppress(Exception):  # a thread cannot be stopped: let it finish
                await asyncio.wait_for(asyncio.shield(self._preparing), 30)
        prepared = self._prepared
        if prepared is None:
            return

        async def session_end() -> None:
            with contextlib.suppress(Exception):
                await TurnHooks(prepared.hooks).session_end()

        inbox = self._inbox
        if inbox is None:  # no prompt was ever submitted
            await session_end()
            with contextlib.suppress(Exception):
                await prepared.shutdown()
            return
        inbox.rebind(prepared)
        if inbox.turn_running:
            self.approver.cancel()
        # The running turn is stopped (every call answered on disk), waiting prompts dropped.
        with contextlib.suppress(Exception):
            await inbox.close("the session ended", timeout=30, before_shutdown=session_end)


def prepare_here(flags: RunFlags, notes: io.StringIO) -> Prepared:
    """The TUI's session: assembled in this process's folder and environment, what assembly
    warns about written to `notes` (shown as notices), the start-up heap frozen after."""
    from tether.runtime.session import gc_policy
    from tether.runtime.session.assembly import RunSpec, prepare

    env = dict(os.environ)
    spec = RunSpec(cwd=Path.cwd(), env=env, home=Path(env.get("HOME") or Path.home()))
    try:
        prepared = prepare(flags, spec)
    finally:
        for message in spec.warnings:
            notes.write(f"tether: {message}\n")
    gc_policy.startup_done()
    return prepared
