"""Writes that arm later execution (`.git/` at any depth, `.tether/`) need a rule naming them or
a human, in every mode, sandbox or not; and tether's own state (`Guards.state_root`) is out of
reach of file tools and shell path words, except the run's own dirs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.core.permissions.support import policy, rules, shell, tool
from tether.core.permissions import Guards

ARMING_PATHS = [
    ".git/hooks/pre-commit", ".git/config", "sub/.git/config", "a/b/.git/hooks/post-checkout",
    ".tether/settings.json", ".tether/mods/x.py", "pkg/.tether/settings.json", ".GIT/config",
    "src/../.git/hooks/x",
]
WRITERS = ["Write", "Edit", "MultiEdit", "NotebookEdit", "write_file", "apply_patch"]


@pytest.fixture
def proj(tmp_path: Path) -> tuple[Path, Path]:
    cwd, home = tmp_path / "proj", tmp_path / "userhome"
    (cwd / ".git" / "hooks").mkdir(parents=True)
    (cwd / "src").mkdir()
    home.mkdir()
    return cwd, home


@pytest.mark.parametrize("path", ARMING_PATHS)
@pytest.mark.parametrize("mode", ["standard", "acceptEdits", "unrestricted"])
def test_file_tools_never_write_arming_dirs_on_a_grant(proj, path, mode) -> None:
    for writer in WRITERS:
        d = tool(policy(*proj, rules(cli_allow=["Edit", "Write"], allow=["Edit(**)"]), mode),
                 writer, path)
        assert d.verdict == "ask", (writer, path, mode, d)


@pytest.mark.parametrize("path", [".git/hooks/pre-commit", "sub/.git/config", ".tether/settings.json"])
def test_a_rule_naming_the_dir_or_a_deny_decides(proj, path) -> None:
    named = path.split("/.git/")[0] + "/.git/**" if "/.git/" in path else (
        ".git/**" if path.startswith(".git") else ".tether/**")
    d = tool(policy(*proj, rules(allow=[f"Write({named})"])), "Write", path)
    assert d.verdict == "allow", d
    d = tool(policy(*proj, rules(deny=["Write(.git/**)", "Write(**/.git/**)", "Write(.tether/**)"]),
                    "unrestricted"), "Write", path)
    assert d.verdict == "deny", d


@pytest.mark.parametrize("target", [".git/hooks/pre-commit", "sub/.git/config", ".tether/settings.json",
                                    ".g*/hooks/pre-commit"])
@pytest.mark.parametrize("mode", ["acceptEdits", "unrestricted"])
def test_redirections_into_arming_dirs_ask(proj, target, mode) -> None:
    (proj[0] / ".git" / "hooks" / "pre-commit").write_text("")  # so the glob matches it
    d = shell(policy(*proj, rules(), mode), f"echo evil > {target}")
    assert d.verdict == "ask", (target, mode, d)
    d = shell(policy(*proj, rules(), mode), f"echo evil >> {target}")
    assert d.verdict == "ask", (target, mode, d)


def test_ordinary_writes_keep_their_grants(proj) -> None:
    assert tool(policy(*proj, rules(), "acceptEdits"), "Write", "src/a.py").verdict == "allow"
    assert tool(policy(*proj, rules(), "unrestricted"), "Write", "src/a.py").verdict == "allow"
    d = shell(policy(*proj, rules(), "acceptEdits"), "echo x > src/a.txt")
    assert d.verdict == "allow" and not d.confine, d
    # `.github` and `.gitignore` are not `.git`
    assert tool(policy(*proj, rules(), "acceptEdits"), "Write", ".github/workflows/x.yml").verdict == "allow"
    assert tool(policy(*proj, rules(), "acceptEdits"), "Write", ".gitignore").verdict == "allow"


def test_a_workspace_under_a_dot_tether_dir_is_not_all_arming(tmp_path) -> None:
    cwd = tmp_path / ".tether" / "agents" / "a" / "memory"
    cwd.mkdir(parents=True)
    home = tmp_path / "userhome"
    home.mkdir()
    assert tool(policy(cwd, home, rules(), "acceptEdits"), "Write", "notes.md").verdict == "allow"


# -- tether's state -----------------------------------------------------------------------------


@pytest.fixture
def state(tmp_path: Path):
    cwd, home = tmp_path / "proj", tmp_path / "userhome"
    th = tmp_path / "tether-home"
    own_mem = th / "agents" / "agent-1" / "memory"
    scratch = th / "conversations" / "conv-1" / "scratch"
    for d in (cwd, home, own_mem, scratch, th / "providers", th / "conversations" / "conv-2"):
        d.mkdir(parents=True, exist_ok=True)
    (th / "providers" / "anthropic.json").write_text("{}")
    guards = Guards(state_root=th, own_state_dirs=(own_mem, scratch))
    pol = dataclasses.replace(policy(cwd, home, rules(), "unrestricted", extra=(th,)), guards=guards)
    return pol, th, own_mem, scratch


def test_file_tools_cannot_reach_tether_state(state) -> None:
    pol, th, own_mem, scratch = state
    for name, path in [("Read", th / "providers" / "anthropic.json"),
                       ("Write", th / "settings.json"),
                       ("Edit", th / "conversations" / "conv-2" / "log.json"),
                       ("Read", th / "agents" / "agent-2" / "memory" / "x.md"),
                       ("Glob", th), ("Grep", th.parent)]:
        d = tool(pol, name, str(path))
        assert d.verdict == "deny" and "tether state guard" in d.reason, (name, path, d)


def test_the_runs_own_dirs_stay_reachable(state) -> None:
    pol, th, own_mem, scratch = state
    for name, path in [("Read", own_mem / "x.md"), ("Write", scratch / "out.txt"),
                       ("Grep", own_mem)]:
        d = tool(pol, name, str(path))
        assert d.verdict == "allow", (name, path, d)


def test_shell_path_words_cannot_reach_tether_state(state) -> None:
    pol, th, own_mem, scratch = state
    for command in (f"cat {th}/providers/anthropic.json", f"cat {th}/providers/*",
                    f"ls {th}/conversations/conv-2", f"echo x > {th}/settings.json",
                    f"cat < {th}/providers/anthropic.json", f"head -c1 {th}/pro*/anth*"):
        d = shell(pol, command)
        assert d.verdict == "deny" and "tether state guard" in d.reason, (command, d)
    assert shell(pol, f"cat {own_mem}/x.md").verdict == "allow"


def test_the_cross_agent_fields_still_work(tmp_path) -> None:
    cwd, home = tmp_path / "proj", tmp_path / "userhome"
    agents = tmp_path / "th" / "agents"
    for d in (cwd, home, agents / "me", agents / "other"):
        d.mkdir(parents=True)
    guards = Guards(agents_root=agents, own_agent_dirs=(agents / "me",))
    pol = dataclasses.replace(policy(cwd, home, rules(), "unrestricted"), guards=guards)
    assert tool(pol, "Read", str(agents / "other" / "x")).verdict == "deny"
    assert tool(pol, "Read", str(agents / "me" / "x")).verdict == "allow"
