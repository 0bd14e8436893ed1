"""In-process file tools against the attacker (issue 14 item 4; catalogue b3, b4, b10, b18, c8).

Each case is one model call run by the real `tether`, with the workspace sandbox on
(`TETHER_FS_SANDBOX=1`) and off, in a mode that lets the permission layer admit the call
(`unrestricted`) so the tools' own defence is what is tested, and in the default mode. The
effect is judged on the output and on disk: the canary is never printed, outside files never
change, a FIFO never hangs the run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from tests.security.support import CANARY_SECRET, World, attempt, tool

# A regex that finds the canary without spelling it: the call itself is echoed on stdout.
CANARY_REGEX = CANARY_SECRET[:-1] + "[" + CANARY_SECRET[-1] + "]"
# The workspace's own `.env` holds the canary too, and with no deny rule it is the model's to
# read: the walks below leave dotfiles out so that only the planted links could leak.
NOT_DOTFILES = "[!.]*"
SANDBOX = {"TETHER_FS_SANDBOX": "1"}
NO_SANDBOX = {"TETHER_FS_SANDBOX": "0"}
UNRESTRICTED = ("--permission-mode", "unrestricted")


@dataclass(frozen=True)
class Case:
    name: str
    setup: Callable[[World], None]
    call: Callable[[World], dict[str, Any]]
    sandbox_only: bool = False  # the user's own files are hidden only by the sandbox's policy
    refused_in: tuple[str, ...] = ()  # what the tool result must say when it got to run


def _link(name: str, target: Callable[[World], os.PathLike[str] | str]) -> Callable[[World], None]:
    def setup(world: World) -> None:
        os.symlink(target(world), world.project / name)

    return setup


def _nothing(world: World) -> None:
    pass


CASES = [
    Case(
        "read-ssh-key-via-symlink",
        _link("k", lambda w: w.home / ".ssh" / "id_rsa"),
        lambda w: tool("Read", file_path="k"),
        sandbox_only=True,
        refused_in=("Read refused",),
    ),
    Case(
        "read-netrc-via-symlink",
        _link("n", lambda w: w.home / ".netrc"),
        lambda w: tool("Read", file_path="n"),
        sandbox_only=True,
        refused_in=("Read refused",),
    ),
    Case(
        "read-ssh-key-direct",
        _nothing,
        lambda w: tool("Read", file_path=str(w.home / ".ssh" / "id_rsa")),
        sandbox_only=True,
    ),
    Case(
        "read-provider-key-via-symlink",
        _link("p", lambda w: w.tether_home / "providers" / "anthropic.json"),
        lambda w: tool("Read", file_path="p"),
        refused_in=("Read refused", "tether state guard"),  # the tool, or the permission layer
    ),
    Case(
        "read-provider-key-via-symlinked-dir",
        _link("d", lambda w: w.tether_home),
        lambda w: tool("Read", file_path="d/providers/anthropic.json"),
        refused_in=("Read refused", "tether state guard"),
    ),
    Case(
        "read-provider-key-direct",
        _nothing,
        lambda w: tool("Read", file_path=str(w.tether_home / "providers" / "anthropic.json")),
    ),
    Case(
        "read-provider-key-via-proc-root",
        _nothing,
        lambda w: tool(
            "Read", file_path=f"/proc/self/root{w.tether_home}/providers/anthropic.json"
        ),
    ),
    Case(
        "grep-home",
        _nothing,
        lambda w: tool("Grep", pattern=CANARY_REGEX, path=str(w.home), output_mode="content"),
        sandbox_only=True,
    ),
    Case(
        "grep-tether-home",
        _nothing,
        lambda w: tool(
            "Grep", pattern=CANARY_REGEX, path=str(w.tether_home), output_mode="content"
        ),
    ),
    Case(
        "grep-through-symlinked-dir",
        _link("th", lambda w: w.tether_home),
        lambda w: tool("Grep", pattern=CANARY_REGEX, path="th", output_mode="content"),
    ),
    Case(
        "grep-through-symlinked-file",
        _link("p", lambda w: w.tether_home / "providers" / "anthropic.json"),
        lambda w: tool("Grep", pattern=CANARY_REGEX, output_mode="content", glob=NOT_DOTFILES),
    ),
    Case(
        "grep-home-through-symlinked-file",
        _link("k", lambda w: w.home / ".ssh" / "id_rsa"),
        lambda w: tool("Grep", pattern=CANARY_REGEX, output_mode="content", glob=NOT_DOTFILES),
    ),
    Case(
        "glob-through-symlinked-dir",
        _link("keys", lambda w: w.tether_home / "providers"),
        lambda w: tool("Glob", pattern="keys/**"),
    ),
    Case(
        "glob-ssh-through-symlinked-dir",
        _link("s", lambda w: w.home / ".ssh"),
        lambda w: tool("Glob", pattern="s/*"),
        sandbox_only=True,
    ),
    Case("ls-provider-keys", _nothing, lambda w: tool("LS", path=str(w.tether_home / "providers"))),
]
# What must never appear in the answer, besides the canary: names inside hidden trees.
HIDDEN_NAMES = ("anthropic.json", "id_rsa")


def _outcome(world: World, case: Case, env: dict[str, str], args: tuple[str, ...]) -> Any:
    case.setup(world)
    before = {
        p: p.read_bytes()
        for p in world.root.rglob("*")
        if p.is_file() and not p.is_relative_to(world.tether_home / "conversations")
    }
    outcome = attempt(world, case.call(world), args=args, env=env)
    assert outcome.run.code == 0, outcome.explain()
    assert len(outcome.results) == 1, outcome.explain()
    assert not outcome.leaked, outcome.explain()
    changed = [p for p, data in before.items() if not p.exists() or p.read_bytes() != data]
    assert not changed, changed
    assert "Traceback" not in outcome.run.stderr, outcome.run.stderr
    return outcome


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_sandbox_on_unrestricted_tools_keep_the_boundary(world: World, case: Case) -> None:
    outcome = _outcome(world, case, SANDBOX, UNRESTRICTED)
    output = outcome.outputs[0]
    if case.call(world)["name"] != "Read":  # a listing names no file inside a hidden tree
        assert not any(name in output for name in HIDDEN_NAMES), outcome.explain()
    if case.refused_in:  # refused by one of the layers named, never leaked
        assert any(words in output for words in case.refused_in), outcome.explain()


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if not c.sandbox_only],
    ids=[c.name for c in CASES if not c.sandbox_only],
)
def test_sandbox_off_unrestricted_tools_never_reach_tether_state(world: World, case: Case) -> None:
    outcome = _outcome(world, case, NO_SANDBOX, UNRESTRICTED)
    if case.call(world)["name"] != "Read":
        assert "anthropic.json" not in outcome.outputs[0], outcome.explain()
    if case.refused_in:
        assert any(words in outcome.outputs[0] for words in case.refused_in), outcome.explain()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_default_mode_leaks_nothing(world: World, case: Case) -> None:
    _outcome(world, case, NO_SANDBOX, ())


@pytest.mark.parametrize("env", [SANDBOX, NO_SANDBOX], ids=["sandbox", "no-sandbox"])
@pytest.mark.parametrize(
    "call",
    [
        {"name": "Read", "arguments": {"file_path": "pipe"}},
        {"name": "Read", "arguments": {"file_path": "via"}},
        {"name": "Grep", "arguments": {"pattern": "x", "path": "pipe"}},
        {"name": "Grep", "arguments": {"pattern": "demo"}},
        {"name": "Edit", "arguments": {"file_path": "pipe", "old_string": "a", "new_string": "b"}},
    ],
    ids=["read", "read-via-symlink", "grep-file", "grep-tree", "edit"],
)
def test_a_fifo_is_never_read_and_never_hangs_the_run(
    world: World, env: dict[str, str], call: dict[str, Any]
) -> None:
    os.mkfifo(world.project / "pipe")
    os.symlink(world.project / "pipe", world.project / "via")
    outcome = attempt(world, call, args=UNRESTRICTED, env=env, timeout=30)
    assert outcome.run.code == 0 and len(outcome.results) == 1, outcome.explain()
    output = outcome.outputs[0]
    if call["name"] == "Grep" and "path" not in call["arguments"]:
        assert "README.md" in output, outcome.explain()  # the rest of the tree was searched
    else:
        assert "FIFO" in output, outcome.explain()


WRITE_CASES = [
    (
        "write-via-preplaced-link",
        _link("link", lambda w: w.outside / "target.txt"),
        lambda w: tool("Write", file_path="link", content="PWNED\n"),
    ),
    (
        "write-via-dangling-link-to-bashrc",
        _link("rc", lambda w: w.home / ".bashrc"),
        lambda w: tool("Write", file_path="rc", content="PWNED\n"),
    ),
    (
        "write-via-symlinked-parent",
        _link("d", lambda w: w.outside),
        lambda w: tool("Write", file_path="d/target.txt", content="PWNED\n"),
    ),
    (
        "edit-via-preplaced-link",
        _link("link", lambda w: w.outside / "target.txt"),
        lambda w: tool("Edit", file_path="link", old_string="original", new_string="PWNED"),
    ),
    (
        "multiedit-via-symlinked-parent",
        _link("d", lambda w: w.outside),
        lambda w: tool(
            "MultiEdit",
            file_path="d/target.txt",
            edits=[{"old_string": "original", "new_string": "PWNED"}],
        ),
    ),
    (
        "write-provider-keys",
        _nothing,
        lambda w: tool(
            "Write",
            file_path=str(w.tether_home / "providers" / "anthropic.json"),
            content="PWNED\n",
        ),
    ),
    (
        "edit-provider-keys-via-link",
        _link("p", lambda w: w.tether_home / "providers" / "anthropic.json"),
        lambda w: tool("Edit", file_path="p", old_string="api_key", new_string="PWNED"),
    ),
]


@pytest.mark.parametrize("env", [SANDBOX, NO_SANDBOX], ids=["sandbox", "no-sandbox"])
@pytest.mark.parametrize("mode", ["unrestricted", "acceptEdits"])
@pytest.mark.parametrize(("name", "setup", "call"), WRITE_CASES, ids=[c[0] for c in WRITE_CASES])
def test_writes_do_not_follow_links_out_of_the_workspace(
    world: World,
    env: dict[str, str],
    mode: str,
    name: str,
    setup: Callable[[World], None],
    call: Callable[[World], dict[str, Any]],
) -> None:
    target = world.outside / "target.txt"
    target.write_text("outside original\n")
    case = Case(name, setup, call)
    outcome = _outcome(world, case, env, ("--permission-mode", mode))
    assert outcome.statuses == ["error"], outcome.explain()
    assert not (world.home / ".bashrc").exists()  # a dangling link's target is never created
    assert sorted(p.name for p in world.outside.iterdir()) == ["target.txt"]
    assert target.read_text() == "outside original\n"


@pytest.mark.parametrize("env", [SANDBOX, NO_SANDBOX], ids=["sandbox", "no-sandbox"])
@pytest.mark.parametrize("swap", ["symlink", "fifo"])
def test_task_output_never_reads_a_log_the_task_swapped(
    world: World, env: dict[str, str], swap: str
) -> None:
    """A background command replaces its own log with a link to tether's provider keys (or a
    FIFO); TaskOutput then refuses it instead of printing the key (or hanging)."""
    from tests.e2e.support import run_tether
    from tests.security.support import MODEL, bash
    from tether.testing.fake_provider import FakeProvider

    # A program's own file access, which no shell analysis sees (a shell path into $TETHER_HOME
    # is refused before the command runs): the swap must be stopped by TaskOutput itself.
    swap_to = ("os.symlink(h + '/providers/anthropic.json', l)" if swap == "symlink"
               else "os.mkfifo(l)")
    plant = ("python3 -c \"import glob, os; h = os.environ['TETHER_HOME']\n"
             "for l in glob.glob(h + '/tmp/*/bash_1.log'): os.remove(l); " + swap_to + '"')
    script: list[dict[str, Any]] = [
        {"tool_calls": [bash(f"{plant}; echo planted", run_in_background=True)]},
        {"tool_calls": [tool("TaskOutput", task_id="bash_1", block=True, timeout=10000)]},
        {"text": "done"},
    ]
    with FakeProvider(script) as fake:
        run = run_tether(
            ["-p", "go", "--model", MODEL, "--output-format", "stream-json", *UNRESTRICTED],
            env=world.env(fake.url, env),
            cwd=world.project,
            timeout=60,
        )
    results = [e for e in run.events if e.get("message_type") == "tool_return_message"]
    assert run.code == 0 and len(results) == 2, run.stdout[-3000:] + run.stderr[-2000:]
    assert CANARY_SECRET not in run.stdout
    assert (world.tether_home / "providers" / "anthropic.json").read_text().count(CANARY_SECRET)
    output = str(results[1]["tool_return"])
    if env is NO_SANDBOX:  # the swap happened: the tool saw it and refused
        assert "TaskOutput refused" in output, output
    else:  # the sandboxed command cannot touch tether's scratch dir at all
        assert "planted" in output, output
