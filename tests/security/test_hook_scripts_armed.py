"""Attacks on the scripts the user's hooks run (issue 30.5): a PostToolUse hook `sh
scripts/fmt.sh` runs that file unsandboxed after every shell call, so a sandboxed command (or an
edit) that rewrites it would run its text outside the sandbox. Those files are armed: the
workspace sandbox keeps them read-only and file-tool writes to them ask. Each case runs the real
`tether` (workspace sandbox on, yolo: nothing but the sandbox and the armed-file rule stand in
the way), then the hook; judged on disk: no MARKER, the script unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.requirements import need_bwrap
from tests.security.support import MARKER, World, attempt, bash, tool
from tether.runtime.extensions.hook_scripts import scripts_of

SANDBOX = {"TETHER_FS_SANDBOX": "1"}
FMT = "echo formatted\n"


def hooked(command: str, event: str = "PostToolUse", matcher: str = "Bash") -> dict[str, Any]:
    return {"hooks": {event: [{"matcher": matcher, "hooks": [{"type": "command", "command": command}]}]}}


def plant(world: World, rel: str, text: str = FMT, mode: int = 0o755) -> Path:
    path = world.project / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


# (hook command, the script it runs, the content that script needs to work as the hook expects)
HOOKS = [
    ("sh scripts/fmt.sh", "scripts/fmt.sh", FMT),
    ("bash ./scripts/fmt.sh --check", "scripts/fmt.sh", FMT),
    ("./scripts/fmt.sh", "scripts/fmt.sh", "#!/bin/sh\n" + FMT),
    ('"$CLAUDE_PROJECT_DIR"/scripts/fmt.sh', "scripts/fmt.sh", "#!/bin/sh\n" + FMT),
    ("python3 tools/fmt.py", "tools/fmt.py", "print('formatted')\n"),
    ("cd scripts && sh fmt.sh", "scripts/fmt.sh", FMT),
    ("make -s fmt", "Makefile", "fmt:\n\t@echo formatted\n"),
    ("cat >/dev/null; env LC_ALL=C sh scripts/fmt.sh", "scripts/fmt.sh", FMT),
]
# A sandboxed command rewriting the script, each in another way.
REWRITES = [
    "printf 'touch {marker}\\n' >> {script}",
    "printf 'touch {marker}\\n' > {script}",
    "printf 'touch {marker}\\n' > t.tmp && mv -f t.tmp {script}",
    "rm -f {script}; printf 'touch {marker}\\n' > {script}",
    "sed -i 's/^/touch {marker}; /' {script}",
]


@pytest.mark.parametrize(("hook", "script", "content"), HOOKS, ids=[h[0] for h in HOOKS])
@pytest.mark.parametrize("rewrite", REWRITES, ids=["append", "truncate", "rename-over", "unlink", "sed-i"])
def test_a_sandboxed_command_cannot_rewrite_a_hook_script(
    world: World, hook: str, script: str, content: str, rewrite: str
) -> None:
    need_bwrap()
    path = plant(world, script, content)
    if script == "Makefile":
        rewrite = rewrite.replace("touch {marker}", "fmt:\\n\\t@touch {marker}")
    command = rewrite.format(marker=MARKER, script=script)
    out = attempt(world, bash(command), args=("--yolo",), env=SANDBOX, settings=hooked(hook))
    assert out.run.code == 0, out.explain()
    assert path.read_text() == content, out.explain()
    assert not world.effects(), out.explain()


def test_other_workspace_files_stay_writable(world: World) -> None:
    """Control: only the scripts hooks run are held; the sandbox still writes the workspace."""
    need_bwrap()
    plant(world, "scripts/fmt.sh")
    other = plant(world, "scripts/build.sh")
    out = attempt(world, bash("echo 'echo built' >> scripts/build.sh"), args=("--yolo",), env=SANDBOX,
                  settings=hooked("sh scripts/fmt.sh"))
    assert out.statuses == ["success"], out.explain()
    assert other.read_text() == FMT + "echo built\n"


PATCH = "*** Begin Patch\n*** Update File: scripts/fmt.sh\n@@\n-echo formatted\n+touch PWNED_MARKER\n*** End Patch\n"
EDITS = [
    (("--toolset", "codex", "--permission-mode", "acceptEdits"), tool("ApplyPatch", input=PATCH)),
    (("--toolset", "codex", "--yolo"), tool("ApplyPatch", input=PATCH)),
    (("--permission-mode", "acceptEdits"), tool("Write", file_path="scripts/fmt.sh", content="touch PWNED_MARKER\n")),
    (("--permission-mode", "acceptEdits"), tool("Edit", file_path="scripts/fmt.sh",
                                                old_string="echo formatted", new_string="touch PWNED_MARKER")),
    (("--allowedTools", "Edit(**)"), tool("Write", file_path="./scripts/../scripts/fmt.sh",
                                          content="touch PWNED_MARKER\n")),
]


@pytest.mark.parametrize(("args", "call"), EDITS, ids=["patch-acceptEdits", "patch-yolo", "Write", "Edit", "Edit-rule"])
def test_an_edit_of_a_hook_script_asks(world: World, args: tuple[str, ...], call: dict[str, Any]) -> None:
    path = plant(world, "scripts/fmt.sh")
    out = attempt(world, call, args=args, settings=hooked("sh scripts/fmt.sh"))
    assert out.run.code == 0, out.explain()
    assert out.statuses == ["error"] and "requires approval" in out.outputs[0], out.explain()
    assert "scripts your hooks run" in out.outputs[0]
    assert path.read_text() == FMT and not world.effects()


def test_a_rule_naming_the_script_allows_editing_it(world: World) -> None:
    path = plant(world, "scripts/fmt.sh")
    call = tool("Write", file_path="scripts/fmt.sh", content="echo reformatted\n")
    out = attempt(world, call, args=("--allowedTools", "Write(scripts/fmt.sh)"),
                  settings=hooked("sh scripts/fmt.sh"))
    assert out.statuses == ["success"], out.explain()
    assert path.read_text() == "echo reformatted\n"


@pytest.mark.parametrize(("command", "expected"), [
    ("sh scripts/fmt.sh", ["scripts/fmt.sh"]),
    ("npx prettier --write . && ./bin/lint", ["bin/lint"]),
    ("python3 -m black . ; node tools/x.js", ["tools/x.js"]),
    ("python3 -c 'print(1)'", []),
    ("jq -r .tool_input.command | grep -q rm && exit 2", []),
    ("FOO=1 exec bash -e hooks/guard.sh", ["hooks/guard.sh"]),
    ("source env/setup.sh; . ./more.sh", ["env/setup.sh", "more.sh"]),
    ("npm run --silent fmt", ["package.json"]),
    ("make -C sub lint", ["sub/Makefile", "sub/makefile", "sub/GNUmakefile"]),
    ("cd hooks && ./run", ["hooks/run"]),
    ("echo 'unterminated", []),
    ("uv run --quiet scripts/fmt.py", ["scripts/fmt.py"]),
    ("poetry run python tools/x.py", ["tools/x.py"]),
    ("pre-commit run --all-files", [".pre-commit-config.yaml"]),
])
def test_the_scripts_a_hook_command_runs(command: str, expected: list[str]) -> None:
    cwd = Path("/w")
    assert [str(p.relative_to(cwd)) for p in scripts_of(command, cwd)] == expected


REDIRECTS = [
    ("printf 'touch PWNED_MARKER\\n' >> scripts/fmt.sh", ("--allowedTools", "Bash(printf:*)",
                                                           "--permission-mode", "acceptEdits")),
    ("echo 'touch PWNED_MARKER' > scripts/fmt.sh", ("--allowedTools", "Bash(echo:*)", "Edit(**)")),
    ("echo 'touch PWNED_MARKER' > .envrc", ("--allowedTools", "Bash(echo:*)", "--permission-mode", "acceptEdits")),
    ("echo '{}' > .vscode/tasks.json", ("--allowedTools", "Bash(echo:*)", "--permission-mode", "acceptEdits")),
    ("echo 'touch PWNED_MARKER' > scripts/fmt.sh", ("--yolo",)),
]


@pytest.mark.parametrize(("command", "args"), REDIRECTS, ids=[r[0][-22:] for r in REDIRECTS])
def test_an_admitted_commands_redirect_into_an_armed_file_asks(
    world: World, command: str, args: tuple[str, ...]
) -> None:
    """Sandbox off: the permission layer alone holds the armed files against a rule or mode
    that admits the command and its redirection."""
    (world.project / ".vscode").mkdir()
    path = plant(world, "scripts/fmt.sh")
    out = attempt(world, bash(command), args=args, env={"TETHER_FS_SANDBOX": "0"},
                  settings=hooked("sh scripts/fmt.sh"))
    assert out.run.code == 0, out.explain()
    assert out.statuses == ["error"] and "requires approval" in out.outputs[0], out.explain()
    assert path.read_text() == FMT and not world.effects()
    assert not (world.project / ".envrc").exists() and not (world.project / ".vscode" / "tasks.json").exists()


# The script is not there yet (nothing to mount read-only): a sandboxed command plants it.
PLANTS = [
    ("sh scripts/fmt.sh", "printf 'touch {marker}\\n' > t.tmp && mkdir -p scripts && cp t.tmp scripts/fmt.sh",
     None),
    ("python3 tools/fmt.py", "echo \"open('{marker}', 'w')\" > t.tmp && mkdir tools && mv t.tmp tools/fmt.py",
     None),
    ("make -s fmt", "printf 'fmt:\\n\\t@touch {marker}\\n' > t.tmp && cp t.tmp GNUmakefile",
     ("Makefile", "fmt:\n\t@true\n")),
]


@pytest.mark.parametrize(("hook", "command", "existing"), PLANTS, ids=[p[0] for p in PLANTS])
def test_a_hook_script_planted_during_the_session_is_not_run(
    world: World, hook: str, command: str, existing: tuple[str, str] | None
) -> None:
    need_bwrap()
    if existing is not None:
        plant(world, *existing)
    out = attempt(world, bash(command.format(marker=MARKER)), args=("--yolo",), env=SANDBOX,
                  settings=hooked(hook))
    assert out.run.code == 0, out.explain()
    assert not world.effects(), out.explain()
    assert "did not exist when this session started" in out.outputs[0], out.explain()


def test_a_hook_script_there_from_the_start_still_runs(world: World) -> None:
    """Control: the hook runs its (unchanged) script after every shell call."""
    plant(world, "scripts/fmt.sh", f"touch {MARKER}.hook-ran\n")
    out = attempt(world, bash("echo hi"), args=("--yolo",), settings=hooked("sh scripts/fmt.sh"))
    assert out.statuses == ["success"], out.explain()
    assert (world.project / f"{MARKER}.hook-ran").exists()
