"""No over-blocking: fifty read-only commands a coding agent runs in an ordinary repository. They
run kernel-confined now, so at most three of them may ask in `standard` mode."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.core.permissions.support import policy, rules, shell

BENIGN = [
    "git status", "git status --short", "git diff", "git diff --stat", "git diff HEAD~1",
    "git log --oneline -5", "git log -p -1", "git show HEAD", "git show --stat HEAD",
    "git branch", "git branch -a", "git rev-parse HEAD", "git rev-parse --show-toplevel",
    "git blame README.md", "git ls-files", "git remote -v", "git tag", "git stash list",
    "ls", "ls -la", "ls -la | head", "cat README.md", "head -n 20 src/app.py",
    "tail -n 20 src/app.py", "rg TODO", "rg -n 'def ' src", "grep -rn foo src",
    "grep -n main src/app.py", "find . -name '*.py'", "find . -type f -maxdepth 2",
    "wc -l *.py", "wc -l src/*.py", "pwd", 'basename "$PWD"', "dirname src/app.py",
    "file README.md", "stat README.md", "du -sh .", "tree -L 2", "sort README.md | uniq",
    "cut -d: -f1 README.md", "jq . package.json", "python3 --version",
    "for f in *.md; do wc -l \"$f\"; done", "echo $(git rev-parse HEAD)",
    "git log --oneline | head -3", "ls src && cat src/app.py", "diff README.md notes.md",
    "cat package.json | jq .name", "which python3",
]


def _repo(root: Path) -> Path:
    repo = root / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "README.md").write_text("# demo\nTODO: more\n")
    (repo / "notes.md").write_text("notes\n")
    (repo / "main.py").write_text("print('hi')\n")
    (repo / "src" / "app.py").write_text("def main():\n    return 1  # foo\n")
    (repo / "package.json").write_text('{"name": "demo"}\n')
    env = {"GIT_CONFIG_NOSYSTEM": "1", "HOME": str(root), "PATH": "/usr/bin:/bin"}
    for args in (["init", "-q"], ["add", "-A"],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env, capture_output=True)
    (repo / "README.md").write_text("# demo\nTODO: more\nchanged\n")
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "two"],
                   cwd=repo, check=True, env=env, capture_output=True)
    return repo


def test_at_most_three_of_fifty_benign_commands_ask(tmp_path: Path) -> None:
    assert len(BENIGN) == 50 and len(set(BENIGN)) == 50
    repo = _repo(tmp_path)
    home = tmp_path / "userhome"
    home.mkdir()
    pol = policy(repo, home, rules())
    asked = {}
    for command in BENIGN:
        d = shell(pol, command)
        if d.verdict != "allow":
            asked[command] = d.reason
        else:
            assert d.confine, (command, d)
    assert len(asked) <= 3, asked
