"""Every command in the README, run as written in a fresh clone of this repository (issue 32).

The clone is `git clone` of the work tree's HEAD. Its quick start runs word for word: a new venv,
`pip install -e .` and a headless turn; then `./scripts/test`, which in a clone without the heavy
installs must stop at once naming them, and runs for real on one selected file. Every line of
the "Using it" block and of the permissions block is expanded (`a|b` alternatives, `[optional]`
parts with and without, `·`-separated commands, `<command>` for each command `tether --help`
lists) and run with the clone's `tether` on PATH against the fake provider. No line is skipped:
the few that need something outside (a Letta server, a package index) run far enough to show
they parsed and reached their action. The placeholders the README uses are filled here:
`agent-local-…` / `--agent …` (the agent the first turn made), `"…"` (a prompt), `URL` (the
fake provider, or the App Server the README line before started), `DIR` (a temporary folder).

Offline: pip gets no index (`PIP_NO_INDEX`); the dev environment's packages stand in for it
through PYTHONPATH, and the build runs without isolation on the dev environment's setuptools.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.requirements import need_tmux
from tests.tui.test_tmux import Tmux
from tether.testing.fake_provider import FakeProvider

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(sysconfig.get_paths()["purelib"])
_SKIP = ("tether", "__editable__", "pip-", "_distutils_hack", "distutils-precedence", "__pycache__")
PROMPT = "check the build"


def readme_blocks(readme: str) -> list[list[str]]:
    """The README's ```sh blocks, each as its lines."""
    return [b.strip("\n").splitlines() for b in re.findall(r"```sh\n(.*?)```", readme, re.S)]


def expand(line: str, commands: list[str]) -> list[str]:
    """The commands one README line shows: the comment cut, `·` split, `[x]` without and with,
    `a|b|c` one each, `<command>` each of tether's commands."""
    line = re.sub(r"\s+#.*$", "", line).strip()
    if not line or line.startswith("#"):
        return []
    out: list[str] = []
    for part in (p.strip() for p in line.split(" · ")):
        variants = [part]
        optional = re.search(r"\s*\[([^\]]+)\]", part)
        if optional:
            variants = [part.replace(optional.group(0), ""),
                        part.replace(optional.group(0), " " + optional.group(1))]
        for variant in variants:
            words = variant.split(" ")
            alt = next((i for i, w in enumerate(words) if "|" in w and '"' not in w), None)
            if alt is not None:
                out += [" ".join([*words[:alt], w, *words[alt + 1:]]) for w in words[alt].split("|")]
            elif "<command>" in variant:
                out += [variant.replace("<command>", c) for c in commands]
            else:
                out.append(variant)
    return out


def offline_deps(tmp: Path) -> Path:
    """The dev environment's packages (never tether itself) as a folder of links, with `bin/ruff`
    where ruff's launcher looks beside a target folder."""
    deps = tmp / "deps"
    (deps / "bin").mkdir(parents=True)
    for entry in SITE.iterdir():
        if not entry.name.startswith(_SKIP) and entry.name != "pip" and entry.suffix != ".pth":
            (deps / entry.name).symlink_to(entry)
    (deps / "bin" / "ruff").symlink_to(Path(sys.executable).with_name("ruff"))
    return deps


@dataclass
class World:
    tmp: Path
    clone: Path
    env: dict[str, str]
    fake: FakeProvider
    failures: list[str] = field(default_factory=list)
    server: subprocess.Popen[str] | None = None
    server_url: str = ""

    def run(self, command: str, *, stdin: str = "", timeout: float = 120,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", command], cwd=self.clone, env={**self.env, **(env or {})},
                              input=stdin, capture_output=True, text=True, timeout=timeout)

    def expect(self, command: str, proc: subprocess.CompletedProcess[str], code: int = 0,
               said: str = "") -> None:
        if proc.returncode != code or said not in proc.stdout + proc.stderr:
            self.failures.append(f"`{command}` exited {proc.returncode} (wanted {code}"
                                 f"{f', saying {said!r}' if said else ''}):\n"
                                 f"{proc.stdout[-1500:]}\n{proc.stderr[-1500:]}")

    def agent(self) -> str:
        proc = self.run("tether agents list")
        return str(json.loads(proc.stdout)[0]["id"])


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("readme")
    clone = tmp / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    if (ROOT / ".mypy_cache").is_dir():  # a warm cache (checked against file hashes)
        shutil.copytree(ROOT / ".mypy_cache", clone / ".mypy_cache")
    scrub = ("TETHER_", "ANTHROPIC_", "OPENAI_", "OLLAMA_", "LETTA_", "GEMINI_", "PIP_",
             "VIRTUAL_ENV", "PYTEST_", "TMUX")
    env = {k: v for k, v in os.environ.items() if not k.startswith(scrub)}
    (tmp / "home").mkdir()
    script = [{"text": f"answer {n} from the fake model"} for n in range(80)]
    with FakeProvider(script, models=["claude-test", "qwen3"]) as fake:
        env.update(
            PATH=f"{clone / '.venv' / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}",
            PYTHONPATH=str(offline_deps(tmp)), PIP_NO_INDEX="1", PIP_NO_BUILD_ISOLATION="0",
            PIP_DISABLE_PIP_VERSION_CHECK="1", TETHER_HOME=str(tmp / "tether-home"),
            HOME=str(tmp / "home"), TETHER_DEV_CACHE=str(tmp / "dev-cache"),
            ANTHROPIC_BASE_URL=fake.url, OPENAI_BASE_URL=fake.url + "/v1",
            OPENAI_API_KEY="sk-test", OLLAMA_BASE_URL=fake.url, ANTHROPIC_API_KEY="sk-test",
            DISABLE_AUTOUPDATER="1",
            TERM="xterm-256color",
        )
        world = World(tmp, clone, env, fake)
        try:
            yield world
        finally:
            stop(world)


def stop(world: World) -> None:
    if world.server is not None and world.server.poll() is None:
        world.server.send_signal(signal.SIGTERM)
        try:
            world.server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            world.server.kill()
            world.server.wait()
    if world.server is not None and world.server.stdout is not None:
        world.server.stdout.close()


def test_quick_start(world: World) -> None:
    install, test = readme_blocks((world.clone / "README.md").read_text())[0]
    assert install.startswith("python3 -m venv .venv && .venv/bin/pip install -e . && ")
    proc = world.run(install, timeout=600)
    world.expect(install, proc)
    assert "from the fake model" in proc.stdout, proc.stdout + proc.stderr
    assert test == "./scripts/test"
    # Nothing heavy is installed in this clone (its TETHER_DEV_CACHE is empty): it stops at once.
    started = subprocess.run(["git", "status", "--porcelain"], cwd=world.clone, text=True,
                             capture_output=True, check=True)
    proc = world.run(test, timeout=120)
    world.expect(test, proc, code=1, said="./scripts/install-letta-server")
    for script in ("install-llama-server", "install-letta-sdk", "install-mcp-servers"):
        assert f"./scripts/{script}" in proc.stderr, proc.stderr
    assert "== pytest" not in proc.stdout  # before any test ran
    # ... and given a selection it installs the dev tools and runs ruff, mypy and those tests.
    proc = world.run(f"{test} tests/test_layers.py", timeout=900)
    world.expect(f"{test} tests/test_layers.py", proc)
    assert re.search(r"\d+ passed", proc.stdout), proc.stdout[-2000:]
    after = subprocess.run(["git", "status", "--porcelain"], cwd=world.clone, text=True,
                           capture_output=True, check=True)
    assert after.stdout == started.stdout  # the tests left the clone as they found it
    assert not world.failures, "\n\n".join(world.failures)


def test_every_line_of_using_it_and_the_permissions_block(world: World) -> None:
    if not (world.clone / ".venv" / "bin" / "tether").exists():
        pytest.fail("the quick start did not install tether into the clone (see test_quick_start)")
    blocks = readme_blocks((world.clone / "README.md").read_text())
    assert len(blocks) == 3, "the README has a new ```sh block: run its lines here too"
    help_text = world.run("tether --help").stdout
    commands = re.findall(r"^  ([a-z-]+)\b", help_text.split("commands:")[1].split("\n\n")[0], re.M)
    assert "cron" in commands and "channels" in commands, help_text
    ran: list[str] = []
    for line in blocks[1] + blocks[2]:
        for command in expand(line, commands):
            ran.append(command)
            run_one(world, command)
    stop(world)
    assert world.server is None or world.server.returncode in (0, -signal.SIGTERM, 143)
    assert len(ran) >= 40, ran
    assert not world.failures, "\n\n".join(world.failures)


def fill(world: World, command: str) -> str:
    if "agent-local-…" in command or "--agent …" in command:
        agent = world.agent()
        command = command.replace("agent-local-…", agent).replace("--agent …", f"--agent {agent}")
    command = command.replace('"…"', f'"{PROMPT}"').replace("--base-url URL",
                                                           f"--base-url {world.fake.url}")
    command = command.replace("--server URL", f"--server {world.server_url}")
    command = command.replace("--out DIR", f"--out {world.tmp / 'memory-export'}")
    command = command.replace("postgresql://…", "postgresql://127.0.0.1:9/tether")  # none here
    left = [p for p in ("…", "URL", "DIR", "<", ">") if p in command.replace("->", "")]
    if left:
        raise AssertionError(f"README line {command!r}: no value for placeholder {left}")
    return command


def run_one(world: World, raw: str) -> None:
    command = fill(world, raw)
    if command.endswith("--help"):
        proc = world.run(command)
        world.expect(command, proc)
        if "usage" not in proc.stdout.lower():
            world.failures.append(f"`{command}` printed no usage:\n{proc.stdout}")
    elif command.startswith("tether server --store"):  # no PostgreSQL here: as far as asking it
        world.expect(command, world.run(command), code=1, said="PostgreSQL store")
    elif command.startswith("tether server"):
        start_server(world, command)
    elif command.startswith("tether channel-gateway"):
        gateway(world, command)
    elif command == "tether --input-format stream-json --output-format stream-json":
        bidirectional(world, command)
    elif command in ("tether", 'tether "first prompt"'):
        terminal(world, command)
    elif "--backend cloud" in command:  # no Letta server here: it must get as far as asking one
        proc = world.run(command, env={"LETTA_BASE_URL": "http://127.0.0.1:9"})
        world.expect(command, proc, code=1, said="cannot reach the Letta server at")
    elif command.startswith("tether store migrate") or (
            command.startswith("tether -p") and "--store" in command):  # no PostgreSQL here
        world.expect(command, world.run(command), code=1, said="PostgreSQL store")
    elif command == "tether update":  # a clone's editable install is updated with git
        world.expect(command, world.run(command), code=1, said="update it with git")
    elif command.startswith("tether cron add") and "--name" not in command:
        proc = world.run(command)
        world.expect(command, proc)
        if proc.returncode == 0 and json.loads(proc.stdout)["name"] != PROMPT:
            world.failures.append(f"`{command}` named the task {proc.stdout}, not after its prompt")
    elif command.startswith("tether channels install "):
        proc = world.run(command)
        world.expect(command, proc)
        if proc.returncode == 0 and not json.loads(proc.stdout).get("bundled"):
            world.failures.append(f"`{command}` did not find the bundled channel: {proc.stdout}")
    elif command.startswith("tether mcp list"):
        proc = world.run(command)
        world.expect(command, proc)
        if proc.returncode == 0:
            listed = {s["name"]: s for s in json.loads(proc.stdout)}
            # added at the local (project) scope: it starts once the folder is trusted
            assert listed["time"].get("status") in ("connected", "held_back"), listed
    else:
        world.expect(command, world.run(command))


def start_server(world: World, command: str) -> None:
    world.server = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=world.clone,
                                    env=world.env, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True)
    assert world.server.stdout is not None
    world.server_url = world.server.stdout.readline().strip()
    if not world.server_url.startswith("ws://127.0.0.1:"):
        world.failures.append(f"`{command}` printed {world.server_url!r}, not its URL")


def gateway(world: World, command: str) -> None:
    """The gateway needs an account: the webhook channel's, listening on a free port."""
    configure = "tether channels configure webhook --set secret=0123456789abcdef --set port=0"
    world.expect(configure, world.run(configure))
    proc = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=world.clone, env=world.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if "channel-gateway: ready" in line:
            break
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    if not any("channel-gateway: ready" in s for s in seen):
        world.failures.append(f"`{command}` never said it was ready:\n{''.join(seen)}{out}{err}")


def bidirectional(world: World, command: str) -> None:
    lines = [
        {"type": "control_request", "request_id": "init_1", "request": {"subtype": "initialize"}},
        {"type": "user", "message": {"role": "user", "content": "hello over stream-json"}},
    ]
    proc = world.run(command, stdin="".join(json.dumps(x) + "\n" for x in lines))
    world.expect(command, proc)
    types = [json.loads(x).get("type") for x in proc.stdout.splitlines() if x.strip()]
    if "result" not in types:
        world.failures.append(f"`{command}` gave no result event: {types}")


def terminal(world: World, command: str) -> None:
    """The interactive UI in a real terminal (tmux): a prompt, its answer, Ctrl-C twice."""
    tmux = Tmux(need_tmux(), world.tmp / "tmux.sock", world.env)
    status = world.tmp / "tui-status"
    status.unlink(missing_ok=True)
    try:
        tmux("new-session", "-d", "-s", "tui", "-x", "120", "-y", "40", "-c", str(world.clone),
             f"{command}; echo $? > {status}")
        tmux.wait_for("Ask tether", timeout=60)
        if command == "tether":
            tmux.wait_for("○ ready", timeout=60)
            tmux("send-keys", "-t", "tui", "ping the model", "Enter")
        tmux.wait_for("from the fake model", timeout=60)
        tmux.wait_for("○ ready", timeout=60)
        tmux("send-keys", "-t", "tui", "C-c")
        tmux.wait_for("press Ctrl-C again to exit")
        tmux("send-keys", "-t", "tui", "C-c")
        deadline = time.monotonic() + 30
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    except AssertionError as exc:
        world.failures.append(f"`{command}` in a terminal: {exc}")
    finally:
        tmux("kill-server")
    if status.exists() and status.read_text().strip() != "0":
        world.failures.append(f"`{command}` exited {status.read_text().strip()}")


def test_the_expansion_of_readme_lines() -> None:
    assert expand("tether mods list · tether hooks list             # what", []) == [
        "tether mods list", "tether hooks list"]
    assert expand("tether models [--provider ollama]   # x", []) == [
        "tether models", "tether models --provider ollama"]
    assert expand("tether completion bash|zsh|fish", []) == [
        "tether completion bash", "tether completion zsh", "tether completion fish"]
    assert expand("tether <command> --help", ["cron", "mcp"]) == [
        "tether cron --help", "tether mcp --help"]
    assert expand("                                # a continued comment", []) == []
    assert expand('tether ["first prompt"]   # the UI', []) == ["tether", 'tether "first prompt"']
