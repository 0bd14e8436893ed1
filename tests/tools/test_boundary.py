"""In-process file tools keep to the sandbox's boundary: hidden paths, tether's own state, FIFOs."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tether.core.tools import Tool, ToolRunContext
from tether.runtime.policy.sandboxing import shell_sandbox_from
from tether.tools.background import BackgroundTasks
from tether.tools.boundary import boundary_for
from tether.tools.edit import EditTool
from tether.tools.files import ReadTool
from tether.tools.listing import LSTool
from tether.tools.search import GlobTool, GrepTool
from tether.tools.tasks import TaskOutputTool

from .support import make_ctx

SECRET = "CANARY-boundary-SECRET"
CONVERSATION = "conv-1"
AGENT = "agent-local-1"


def _b64(text: str) -> str:
    import base64

    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()


@dataclass
class Layout:
    root: Path
    home: Path  # the user's $HOME
    tether: Path  # $TETHER_HOME
    work: Path  # the workspace (cwd)
    scratch: Path  # this conversation's scratch dir

    def ctx(self, *, sandbox: bool, **services: Any) -> ToolRunContext:
        if sandbox:
            env = {"TETHER_FS_SANDBOX": "1", "HOME": str(self.home)}
            services["sandbox"] = shell_sandbox_from(
                env, None, self.work, self.tether, self.scratch
            )
        services["tether_home"] = self.tether
        return make_ctx(
            self.work,
            scratch_dir=self.scratch,
            services=services,
            env={"TETHER_AGENT_ID": AGENT, "TETHER_CONVERSATION_ID": CONVERSATION},
        )

    def run(self, tool: Tool, args: dict[str, Any], *, sandbox: bool, **services: Any) -> str:
        import asyncio

        result = asyncio.run(tool.run(args, self.ctx(sandbox=sandbox, **services)))
        return result.output


def _write(path: Path, text: str = f"token={SECRET}\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    home, tether = tmp_path / "home", tmp_path / "home" / ".tether"
    work = tmp_path / "home" / "proj"
    scratch = tether / "tmp" / CONVERSATION
    _write(home / ".ssh" / "id_rsa")
    _write(home / ".aws" / "credentials")
    _write(tether / "providers" / "anthropic.json")
    _write(tether / "checkpoints.db")
    _write(tether / "conversations" / _b64("conversation:conv-2") / "messages.jsonl")
    _write(tether / "tmp" / "conv-2" / "bash_1.log")
    _write(tether / "settings.json")
    _write(
        tether / "conversations" / _b64(f"conversation:{CONVERSATION}") / "messages.jsonl", "mine\n"
    )
    _write(scratch / "bash_9.log", "own log\n")
    _write(work / "main.py", "print('hello')\n")
    return Layout(tmp_path, home, tether, work, scratch)


ALWAYS_HIDDEN = [
    "providers/anthropic.json",
    "checkpoints.db",
    f"conversations/{_b64('conversation:conv-2')}/messages.jsonl",
    "tmp/conv-2/bash_1.log",
]


@pytest.mark.parametrize("sandbox", [False, True], ids=["no-sandbox", "sandbox"])
@pytest.mark.parametrize("rel", ALWAYS_HIDDEN)
def test_read_never_opens_tether_state_directly_or_through_a_symlink(
    layout: Layout, rel: str, sandbox: bool
) -> None:
    target = layout.tether / rel
    (layout.work / "link").symlink_to(target)
    for spelled in (str(target), "link", str(layout.tether / "tmp" / ".." / rel)):
        output = layout.run(ReadTool(), {"file_path": spelled}, sandbox=sandbox)
        assert SECRET not in output and "Read refused" in output, output


def test_read_of_own_state_and_the_workspace_works(layout: Layout) -> None:
    for sandbox in (False, True):
        mine = layout.run(
            ReadTool(), {"file_path": str(layout.scratch / "bash_9.log")}, sandbox=sandbox
        )
        assert "own log" in mine
        assert "hello" in layout.run(ReadTool(), {"file_path": "main.py"}, sandbox=sandbox)
    records = layout.tether / "conversations" / _b64(f"conversation:{CONVERSATION}")
    assert "mine" in layout.run(
        ReadTool(), {"file_path": str(records / "messages.jsonl")}, sandbox=False
    )


@pytest.mark.parametrize("rel", [".ssh/id_rsa", ".aws/credentials", ".tether/settings.json"])
def test_with_the_sandbox_read_hides_what_the_shell_cannot_read(layout: Layout, rel: str) -> None:
    (layout.work / "k").symlink_to(layout.home / rel)
    for spelled in (str(layout.home / rel), "k"):
        output = layout.run(ReadTool(), {"file_path": spelled}, sandbox=True)
        assert SECRET not in output and "Read refused" in output, output
    # Without the sandbox the user's own files are the permission layer's business.
    assert SECRET in layout.run(ReadTool(), {"file_path": "k"}, sandbox=False)


def test_boundary_deeper_root_wins(layout: Layout) -> None:
    boundary = boundary_for(layout.ctx(sandbox=True))
    assert boundary.why_hidden(str(layout.tether / "agents" / AGENT / "memory" / "a.md")) is None
    assert boundary.why_hidden(str(layout.tether / "agents" / "agent-other" / "memory"))
    assert boundary.why_hidden(str(layout.tether / "settings.json"))
    assert boundary.why_hidden(str(layout.scratch / "x")) is None
    assert boundary.why_hidden(str(layout.work / "x")) is None
    assert boundary.why_hidden(str(layout.home / ".ssh")) is not None
    assert not boundary.prune(str(layout.tether))  # the scratch dir below it stays reachable
    assert boundary.prune(str(layout.tether / "providers"))
    assert boundary.prune(str(layout.home / ".ssh"))


@pytest.mark.parametrize("sandbox", [False, True], ids=["no-sandbox", "sandbox"])
def test_grep_across_home_and_tether_home_skips_hidden_trees(layout: Layout, sandbox: bool) -> None:
    _write(layout.work / "ok.txt", f"{SECRET[:6]} visible\n")
    (layout.work / "keys").symlink_to(layout.tether / "providers" / "anthropic.json")
    for root in (layout.home, layout.tether, layout.work):
        for mode in ("content", "files_with_matches", "count"):
            output = layout.run(
                GrepTool(),
                {"pattern": "SECRET", "path": str(root), "output_mode": mode},
                sandbox=sandbox,
            )
            assert "providers" not in output and "checkpoints" not in output, output
            assert "conv-2" not in output and _b64("conversation:conv-2") not in output
            if sandbox:
                assert ".ssh" not in output and ".aws" not in output and SECRET not in output
    # The walk itself still works: the workspace match is found from every root above it.
    output = layout.run(
        GrepTool(), {"pattern": "visible", "path": str(layout.home)}, sandbox=sandbox
    )
    assert "ok.txt" in output


def test_grep_of_a_single_hidden_file_is_refused(layout: Layout) -> None:
    (layout.work / "k").symlink_to(layout.home / ".ssh" / "id_rsa")
    output = layout.run(
        GrepTool(), {"pattern": "token", "path": "k", "output_mode": "content"}, sandbox=True
    )
    assert SECRET not in output and "refused" in output


def test_glob_through_a_symlinked_dir_lists_nothing_hidden(layout: Layout) -> None:
    (layout.work / "ssh").symlink_to(layout.home / ".ssh")
    (layout.work / "keys").symlink_to(layout.tether / "providers")
    (layout.work / "one").symlink_to(layout.home / ".ssh" / "id_rsa")
    for sandbox in (False, True):
        for pattern in ("keys/*", "keys/**", str(layout.tether / "providers" / "*")):
            output = layout.run(GlobTool(), {"pattern": pattern}, sandbox=sandbox)
            assert "anthropic.json" not in output, (pattern, output)
        output = layout.run(
            GlobTool(), {"pattern": "**/*", "path": str(layout.tether)}, sandbox=sandbox
        )
        assert "anthropic" not in output and "conv-2" not in output
        assert "bash_9.log" in output  # this conversation's own scratch stays visible
    for pattern in ("ssh/*", "**/id_rsa", str(layout.home / ".ssh" / "*")):
        output = layout.run(GlobTool(), {"pattern": pattern}, sandbox=True)
        assert "id_rsa" not in output, (pattern, output)


def test_ls_leaves_out_hidden_trees(layout: Layout) -> None:
    output = layout.run(LSTool(), {"path": str(layout.tether)}, sandbox=True)
    assert "providers" not in output and "conv-2" not in output and CONVERSATION in output
    output = layout.run(LSTool(), {"path": str(layout.tether / "providers")}, sandbox=False)
    assert "refused" in output and "anthropic" not in output


def test_edit_does_not_show_a_hidden_file(layout: Layout) -> None:
    (layout.work / "k").symlink_to(layout.tether / "providers" / "anthropic.json")
    output = layout.run(
        EditTool(), {"file_path": "k", "old_string": "token", "new_string": "t"}, sandbox=False
    )
    assert SECRET not in output and "refused" in output
    assert (layout.tether / "providers" / "anthropic.json").read_text().startswith("token=")


@pytest.mark.parametrize(
    "path",
    [
        "/proc/self/environ",
        "/proc/thread-self/environ",
        "/proc/<pid>/environ",  # this process's pid, filled in at run time (xdist workers differ)
        "/proc/self/mem",
        "/dev/null",
        "/dev/zero",
        "/dev/tty",
    ],
)
def test_process_secrets_and_devices_are_never_read(layout: Layout, path: str) -> None:
    path = path.replace("<pid>", str(os.getpid()))
    output = layout.run(ReadTool(), {"file_path": path}, sandbox=False)
    assert "refused" in output or "Could not read" in output or "not exist" in output, output
    assert "PATH=" not in output


def _finishes(fn: Any, fifo: Path, seconds: float = 5.0) -> Any:
    """fn()'s value; fails (after unblocking the reader) if it is still waiting on `fifo`."""
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        with contextlib.suppress(OSError):  # a reader stuck in open() lets a writer in
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(5)
        pytest.fail(f"blocked on the FIFO {fifo}")
    return box[0]


@pytest.fixture
def fifo(layout: Layout) -> Iterator[Path]:
    path = layout.work / "pipe"
    os.mkfifo(path)
    yield path


def test_read_of_a_fifo_is_refused_without_blocking(layout: Layout, fifo: Path) -> None:
    (layout.work / "via").symlink_to(fifo)
    for spelled in ("pipe", "via"):
        output = _finishes(
            lambda s=spelled: layout.run(ReadTool(), {"file_path": s}, sandbox=False), fifo
        )
        assert "FIFO" in output and "refused" in output


def test_grep_and_glob_skip_a_fifo(layout: Layout, fifo: Path) -> None:
    output = _finishes(lambda: layout.run(GrepTool(), {"pattern": "hello"}, sandbox=False), fifo)
    assert "main.py" in output
    output = _finishes(
        lambda: layout.run(GrepTool(), {"pattern": "x", "path": "pipe"}, sandbox=False), fifo
    )
    assert "FIFO" in output
    output = _finishes(lambda: layout.run(GlobTool(), {"pattern": "*"}, sandbox=False), fifo)
    assert "main.py" in output and "pipe" not in output


def test_edit_of_a_fifo_is_refused(layout: Layout, fifo: Path) -> None:
    output = _finishes(
        lambda: layout.run(
            EditTool(), {"file_path": "pipe", "old_string": "a", "new_string": "b"}, sandbox=False
        ),
        fifo,
    )
    assert "FIFO" in output


@pytest.mark.parametrize("swap", ["fifo", "symlink-to-key", "symlink-to-ssh"])
def test_task_output_does_not_read_a_swapped_log(layout: Layout, swap: str) -> None:
    import asyncio

    async def scenario() -> str:
        pool = BackgroundTasks(layout.scratch)
        task = await pool.start("echo started", cwd=layout.work)
        await pool.wait(task.id, 10)
        task.log_path.unlink()
        if swap == "fifo":
            os.mkfifo(task.log_path)
        elif swap == "symlink-to-key":
            task.log_path.symlink_to(layout.tether / "providers" / "anthropic.json")
        else:
            task.log_path.symlink_to(layout.home / ".ssh" / "id_rsa")
        ctx = layout.ctx(sandbox=True, background=pool)
        result = await TaskOutputTool().run({"task_id": task.id, "block": False, "timeout": 0}, ctx)
        return result.output

    output = _finishes(lambda: asyncio.run(scenario()), layout.scratch / "bash_1.log")
    assert SECRET not in output and "TaskOutput refused" in output, output


def test_walks_do_not_leave_the_tree_through_a_file_link(layout: Layout) -> None:
    _write(layout.root / "elsewhere" / "notes.txt", f"token={SECRET}\n")
    (layout.work / "out.txt").symlink_to(layout.root / "elsewhere" / "notes.txt")
    (layout.work / "in.txt").symlink_to(layout.work / "main.py")
    for sandbox in (False, True):
        output = layout.run(
            GrepTool(), {"pattern": "token|hello", "output_mode": "content"}, sandbox=sandbox
        )
        # As ripgrep: walks follow no link, in the tree or out of it; the target is found by
        # its own name.
        assert SECRET not in output and "in.txt" not in output and "main.py" in output, output
        output = layout.run(GlobTool(), {"pattern": "*.txt"}, sandbox=sandbox)
        assert "in.txt" not in output and "out.txt" not in output, output
    # Named directly, the link is the permission layer's to judge, and Read follows it.
    assert SECRET in layout.run(ReadTool(), {"file_path": "out.txt"}, sandbox=False)


@pytest.mark.parametrize("tool", [GrepTool(), GlobTool(), LSTool()], ids=lambda t: t.name)
def test_a_search_rooted_in_a_hidden_tree_is_refused_not_empty(layout: Layout, tool: Tool) -> None:
    args: dict[str, Any] = {"path": str(layout.tether / "providers")}
    if tool.name != "LS":
        args["pattern"] = "*" if tool.name == "Glob" else "."
    output = layout.run(tool, args, sandbox=False)
    assert f"{tool.name} refused" in output and "anthropic" not in output, output
    args["path"] = str(layout.home / ".ssh")
    output = layout.run(tool, args, sandbox=True)
    assert f"{tool.name} refused" in output and "id_rsa" not in output, output


def test_a_unix_socket_file_is_refused_not_connected(layout: Layout) -> None:
    import socket

    path = layout.work / "sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(path))
        server.listen(1)
        for tool, args in (
            (ReadTool(), {"file_path": "sock"}),
            (GrepTool(), {"pattern": "x", "path": "sock"}),
            (EditTool(), {"file_path": "sock", "old_string": "a", "new_string": "b"}),
        ):
            output = layout.run(tool, args, sandbox=False)
            assert "a socket" in output, output
        assert "main.py" in layout.run(GrepTool(), {"pattern": "hello"}, sandbox=False)
    finally:
        server.close()
