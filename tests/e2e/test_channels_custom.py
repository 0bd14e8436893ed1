"""A custom channel written against the plugin contract (tests/channels/custom_filedrop),
installed with `tether channels install`, configured, routed and used end to end."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.channels.platforms import Stack, wait_until
from tests.e2e.support import TETHER
from tether.testing.fake_provider import FakeProvider

PLUGIN = Path(__file__).parent.parent / "channels" / "custom_filedrop"


def test_a_custom_channel_is_installed_routed_and_answers(
    tmp_path: Path, tether_home: Path, workdir: Path
) -> None:
    drop = tmp_path / "drop"
    drop.mkdir()
    call = {"name": "MessageChannel",
            "arguments": {"channel": "filedrop", "chat_id": "room", "text": "custom hello"}}
    with FakeProvider([{"tool_calls": [call]}, {"text": "done"}]) as fake:
        stack = Stack(fake.url, tether_home, tmp_path, workdir)
        try:
            installed = stack.channels("install", str(PLUGIN))
            assert installed["id"] == "filedrop" and "trusted code" in installed["note"]
            assert (tether_home / "channels" / "filedrop" / "entry.py").exists()
            agent = stack.agent()
            stack.channels("configure", "filedrop", "--set", f"dir={drop}", "--allow", "ann")
            stack.channels("route", "add", "filedrop", "room", "--agent", agent)
            assert stack.channels("route", "list")[0]["chat"] == "room"
            status = stack.channels("status")
            assert status["installed_channels"] == ["filedrop"] and "trusted" in status["note"]
            assert status["accounts"][0]["config"] == {"dir": "[redacted]"}
            stack.start_gateway()
            (drop / "inbox.jsonl").write_text(
                json.dumps({"id": "1", "chat": "room", "user": "ann", "text": "hi custom"}) + "\n"
            )
            outbox = drop / "outbox.jsonl"
            wait_until(lambda: outbox.exists() and outbox.read_text(), what="the reply")
            wait_until(lambda: len(fake.requests) == 2, what="the turn to finish")
        finally:
            stack.stop()
        assert "hi custom" in json.dumps(fake.requests[0]["body"])
    assert [json.loads(x) for x in outbox.read_text().splitlines()] == [
        {"chat": "room", "text": "custom hello"}
    ]


def test_a_configure_missing_a_required_field_is_refused_by_name(
    tmp_path: Path, tether_home: Path, workdir: Path
) -> None:
    env = {"TETHER_HOME": str(tether_home), "HOME": str(tmp_path / "home"),
           "PATH": "/usr/bin:/bin"}
    run = [TETHER, "channels"]
    assert subprocess.run([*run, "install", str(PLUGIN)], env=env, capture_output=True,
                          timeout=60).returncode == 0
    proc = subprocess.run([*run, "configure", "filedrop"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1 and "needs config 'dir'" in proc.stderr
    proc = subprocess.run([*run, "configure", "nosuch"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1 and "no channel 'nosuch'" in proc.stderr


def test_the_gateway_names_what_is_missing(tmp_path: Path, tether_home: Path) -> None:
    env = {"TETHER_HOME": str(tether_home), "HOME": str(tmp_path / "home"),
           "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([TETHER, "channel-gateway"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1 and "--server" in proc.stderr
    proc = subprocess.run([TETHER, "channel-gateway", "--server", "ws://127.0.0.1:9/ws"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "no channel account is configured" in proc.stderr
    proc = subprocess.run([TETHER, "channel-gateway", "--server", "ws://127.0.0.1:9/ws",
                           "--token-file", str(tmp_path / "missing")],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "--token-file" in proc.stderr


def test_bind_routes_every_chat_of_an_account_and_needs_the_account(
    tmp_path: Path, tether_home: Path
) -> None:
    from tether.backends.local.store import LocalStore

    agent = LocalStore(tether_home).create_agent(model=None, system="s").id
    env = {"TETHER_HOME": str(tether_home), "HOME": str(tmp_path / "home"),
           "PATH": "/usr/bin:/bin"}
    run = [TETHER, "channels"]
    proc = subprocess.run([*run, "bind", "webhook", "--agent", agent], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "configure it first" in proc.stderr
    subprocess.run([*run, "configure", "webhook", "--set", "secret=" + "k" * 16], env=env,
                   check=True, capture_output=True, timeout=60)
    proc = subprocess.run([*run, "bind", "webhook", "--agent", "agent-local-nope"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "agent-local-nope" in proc.stderr
    proc = subprocess.run([*run, "bind", "webhook", "--agent", agent], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["chat"] == "*"
    routes = (tether_home / "channels" / "routing.yaml").read_text()
    assert "chat: '*'" in routes and agent in routes
