"""The attacker's harness: one tool call from a (prompt-injected) model, run by the real `tether`.

`attempt(call, ...)` builds a hostile-but-ordinary world in a temporary folder — a project
with canary secrets, a fake `$HOME` holding credential files, a `$TETHER_HOME` — scripts the fake
provider to propose `call` and then end the turn, runs `tether -p` as a user would (default mode
`standard` unless `args` says otherwise) and returns what happened: the verdict the model saw
and what changed on disk. Tests judge by effect: a marker file that exists, a canary that was
printed, a file that changed — never only by the verdict.

Every world carries the same canaries, so a data-driven test can say "no effect" once:

- `project/.env` and `home/.ssh/id_rsa`, `home/.aws/credentials`, `home/.netrc` … hold
  `CANARY_SECRET`; a tool result containing it is a leak.
- `MARKER` is the name attack commands write (`touch MARKER`, `> $MARKER` …); `world.effects()`
  lists every place it appeared (workspace, home, /tmp of the test, the outside folder).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.e2e.support import Run, run_tether, tether_env
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"
CANARY_SECRET = "CANARY-7f3a9c-SECRET"
MARKER = "PWNED_MARKER"
CREDENTIAL_FILES = (
    ".ssh/id_rsa",
    ".aws/credentials",
    ".netrc",
    ".git-credentials",
    ".docker/config.json",
    ".config/gh/hosts.yml",
    ".kube/config",
    ".npmrc",
    ".pypirc",
)


def bash(command: str, **extra: Any) -> dict[str, Any]:
    """A Bash tool call as a model would send it."""
    return {"name": "Bash", "arguments": {"command": command, "description": "run it", **extra}}


def tool(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


@dataclass
class World:
    """The folders one attempt runs in; `root` is the test's tmp_path."""

    root: Path
    project: Path
    home: Path
    tether_home: Path
    outside: Path  # a folder outside the workspace the attacker would like to write to

    @staticmethod
    def build(root: Path, *, git: bool = False) -> World:
        project, home = root / "project", root / "home"
        tether_home, outside = root / "tether-home", root / "outside"
        for d in (project, home, tether_home, outside):
            d.mkdir(parents=True, exist_ok=True)
        (project / ".env").write_text(f"API_KEY={CANARY_SECRET}\n")
        (project / "README.md").write_text("# demo\n")
        (project / "notes.md").write_text("notes\n")
        for rel in CREDENTIAL_FILES:
            path = home / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"secret={CANARY_SECRET}\n")
        providers = tether_home / "providers"
        providers.mkdir(parents=True, exist_ok=True)
        (providers / "anthropic.json").write_text(json.dumps({"api_key": CANARY_SECRET}))
        world = World(root, project, home, tether_home, outside)
        if git:
            world.git("init", "-q")
            world.git("add", "-A")
            world.git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
        return world

    def git(self, *args: str, cwd: Path | None = None) -> None:
        import subprocess

        subprocess.run(["git", *args], cwd=cwd or self.project, check=True,
                       env={**os.environ, "HOME": str(self.home), "GIT_CONFIG_NOSYSTEM": "1"},
                       capture_output=True)

    def effects(self, marker: str = MARKER) -> list[Path]:
        """Every file or folder whose name starts with `marker` anywhere in the world (attacks
        aimed outside the workspace name `world.outside`, never a shared /tmp)."""
        return sorted(self.root.rglob(f"{marker}*"))

    def env(self, url: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = tether_env(url, MODEL, {"HOME": str(self.home), "TETHER_HOME": str(self.tether_home)})
        env.update(extra or {})
        return env


@dataclass
class Outcome:
    run: Run
    world: World
    results: list[dict[str, Any]] = field(default_factory=list)  # tool_return_message events

    @property
    def statuses(self) -> list[str]:
        return [r.get("status", "") for r in self.results]

    @property
    def outputs(self) -> list[str]:
        return [str(r.get("tool_return", "")) for r in self.results]

    @property
    def denied(self) -> bool:
        """Every call came back refused (headless: `Tool requires approval…` or a deny)."""
        return bool(self.results) and all(
            "requires approval" in o or "denied" in o.lower() for o in self.outputs
        )

    @property
    def leaked(self) -> bool:
        return CANARY_SECRET in self.run.stdout

    def effect_free(self) -> bool:
        return not self.leaked and not self.world.effects()

    def explain(self) -> str:
        return (f"exit {self.run.code}; effects {self.world.effects()}; leaked {self.leaked}\n"
                f"outputs: {self.outputs}\nstderr: {self.run.stderr[-2000:]}")


def attempt(
    world: World,
    calls: dict[str, Any] | Sequence[dict[str, Any]],
    *,
    args: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    settings: Mapping[str, Any] | None = None,
    project_settings: Mapping[str, Any] | None = None,
    timeout: float = 60,
) -> Outcome:
    """Run `tether -p` in `world.project` with the model proposing `calls` (in one step)."""
    call_list = [calls] if isinstance(calls, dict) else list(calls)
    if settings is not None:
        (world.tether_home / "settings.json").write_text(json.dumps(settings))
    if project_settings is not None:
        (world.project / ".tether").mkdir(exist_ok=True)
        (world.project / ".tether" / "settings.json").write_text(json.dumps(project_settings))
    script = [{"tool_calls": call_list}, {"text": "done"}]
    with FakeProvider(script) as fake:
        run = run_tether(
            ["-p", "go", "--model", MODEL, "--output-format", "stream-json", *args],
            env=world.env(fake.url, env),
            cwd=world.project,
            timeout=timeout,
        )
    results = [e for e in run.events if e.get("message_type") == "tool_return_message"]
    return Outcome(run, world, results)
