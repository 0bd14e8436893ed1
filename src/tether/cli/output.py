"""Headless output: stream-json lines (chosen by protocol/stream_json.py, shaped by
protocol/wire.py) written to stdout, or the run's end as text or one json document.

stdout is written and flushed line by line (real clients do not set PYTHONUNBUFFERED); a failed
write (the reader went away) is reported on stderr and turns the exit code into 1.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import orjson

from tether.core.turn import Event, TurnOutcome
from tether.errors import TetherError
from tether.protocol import wire
from tether.protocol.stream_json import NO_RESPONSE, StreamJsonEncoder
from tether.protocol.turns import LocalToolReturn, TurnError

if TYPE_CHECKING:
    from tether.runtime.session.prepared import Prepared


class StdoutGone(Exception):
    pass


def say(text: str) -> None:
    """A line on stderr; after a hang-up the terminal is gone (EIO), and that is no new error."""
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def write_line(obj: dict[str, Any], *, indent: bool = False) -> None:
    data = orjson.dumps(obj, option=orjson.OPT_INDENT_2 if indent else 0) + b"\n"
    try:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    except (BrokenPipeError, ValueError, OSError) as exc:
        abandon_stdout()
        raise StdoutGone(str(exc)) from exc


def abandon_stdout() -> None:
    """Point fd 1 at /dev/null once the reader is gone (a closed pipe, a hung-up terminal), so
    the interpreter's last flush of what is still buffered cannot fail and turn the exit code
    into 120."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError):
        pass


def init_fields(prepared: Prepared) -> dict[str, Any]:
    """The `system/init` event's fields as this run really is: memory, skill sources, the
    reflection trigger the agent will use, MCP servers (not the wire's defaults)."""
    from tether.runtime.extensions.skills import SOURCES

    flags, services = prepared.flags, prepared.services
    skills = services.skills
    sources = [s for s in SOURCES if skills is not None and s in skills.sources]
    trigger, steps = flags.reflection_trigger, flags.reflection_step_count
    if services.reflection is None:
        trigger = "off"
    elif trigger is None or steps is None:
        from tether.runtime.agents.reflection import load_state

        try:
            saved = load_state(prepared.store, prepared.session.agent.id)
            trigger, steps = trigger or saved.trigger, steps or saved.step_count
        except (OSError, ValueError, TetherError):
            trigger = trigger or "off"  # an unreadable state file reflects on nothing
    fields: dict[str, Any] = {
        "model": prepared.session.model,
        "tools": prepared.registry.names(),
        "cwd": str(prepared.cwd),
        "permission_mode": flags.permission_mode,
        "memfs_enabled": services.memfs is not None,
        "skill_sources": sources,
        "reflection_trigger": trigger,
    }
    if steps is not None:
        fields["reflection_step_count"] = steps
    if services.mcp is not None:
        fields["mcp_servers"] = services.mcp.status()
    return fields


class Renderer:
    """Receives every turn event; stream-json lines come from the wire's encoder as they
    complete, and `finish` writes the end of the turn in the chosen format."""

    def __init__(self, fmt: str, envelope: wire.Envelope, *, partial: bool) -> None:
        self.fmt = fmt
        self.env = envelope
        self.partial = partial
        self.encoder = StreamJsonEncoder(envelope, partial=partial)
        self.errors: list[TurnError] = []
        self.last_tool_output = ""  # the turn's result when it ends on tool output and no text

    def emit_init(self, **fields: Any) -> None:
        if self.fmt == "stream-json":
            write_line(self.encoder.init(**fields))

    def on_event(self, event: Event) -> None:
        if isinstance(event, TurnError):
            self.errors.append(event)
        elif isinstance(event, LocalToolReturn):
            self.last_tool_output = event.result.output
        if self.fmt == "stream-json":
            for line in self.encoder.encode(event):
                write_line(line)

    def fill_result(self, outcome: TurnOutcome) -> None:
        """A turn that ended on tool output with no text has that output as its result."""
        if not outcome.last_tool_result:
            outcome.last_tool_result = self.last_tool_output

    def flush(self) -> None:
        for line in self.encoder.flush():
            write_line(line)

    def finish(
        self, outcome: TurnOutcome, *, duration_ms: int, api_ms: int, result_on_error: bool = False
    ) -> int:
        """Write the turn's end; returns the exit code (0, 1 or 130).

        One-shot errors are an `error` event only, as in the reference; with `result_on_error`
        (tether's own state failed: a full disk, the effect store) stream-json also gets a
        `result` line with subtype `error`, and stderr the message, whatever the format."""
        self.flush()
        self.fill_result(outcome)
        if outcome.error is not None and (self.fmt != "stream-json" or result_on_error):
            say(f"Error: {outcome.error.message}")
        if self.fmt == "stream-json":
            line = self.encoder.run_result(
                outcome, duration_ms=duration_ms, api_ms=api_ms, result_on_error=result_on_error
            )
            if line is not None:
                write_line(line)
        if outcome.error is not None:
            return 130 if outcome.interrupted else 1
        text = outcome.result_text or NO_RESPONSE
        if self.fmt == "json":
            write_line(
                wire.json_result(
                    self.env,
                    duration_ms=duration_ms,
                    duration_api_ms=api_ms,
                    num_turns=outcome.steps,
                    result=text,
                    usage=wire.usage_dict(outcome.usage, outcome.steps),
                ),
                indent=True,
            )
        elif self.fmt != "stream-json":
            try:
                sys.stdout.write(text + "\n")
                sys.stdout.flush()
            except (BrokenPipeError, ValueError, OSError) as exc:
                abandon_stdout()
                raise StdoutGone(str(exc)) from exc
            if not outcome.result_text:
                return 1
        return 0


def report_failure(fmt: str, envelope: wire.Envelope, message: str, *, duration_ms: int = 0) -> int:
    """A run that failed outside any turn (tether's own state could not be read or written):
    `Error: …` on stderr, and for stream-json an `error` line and a `result` line with subtype
    `error`. Returns the exit code, 1. A reader that went away is not an extra failure."""
    say(f"Error: {message}")
    if fmt == "stream-json":
        try:
            for line in wire.failure_results(envelope, message, duration_ms=duration_ms):
                write_line(line)
        except StdoutGone:
            pass
    return 1
