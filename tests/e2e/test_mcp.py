"""End to end: real MCP servers (mcp-server-time, mcp-server-git, the SDK-built toybox) under
the real `tether` command: configuration sources, trust, rules, failures, and no orphans."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.support import TETHER, Run, run_tether, tether_env
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"
REPO = Path(__file__).resolve().parents[2]
TIME = {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}


def toybox(*mode: str, mark: str = "") -> dict[str, Any]:
    env = {"TOYBOX_MARK": mark} if mark else {}
    return {"command": sys.executable, "args": ["-m", "tests.mcp.servers.toybox", *mode],
            "cwd": str(REPO), "env": env}


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def write_settings(home: Path, data: dict[str, Any]) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "settings.json").write_text(json.dumps(data))


def run_turns(
    workdir: Path, script: list[dict[str, Any]], *flags: str
) -> tuple[Run, list[dict[str, Any]]]:
    with FakeProvider(script) as fake:
        run = run_tether(["-p", "go", "--model", MODEL, "--output-format", "stream-json", *flags],
                         env=tether_env(fake.url, MODEL), cwd=workdir, timeout=120)
        return run, [r["body"] for r in fake.requests]


def returns(run: Run) -> list[dict[str, Any]]:
    """Tool returns in the order the model proposed the calls (reads finish first)."""
    by_id = {r["tool_call_id"]: r for r in run.of_type("message", "tool_return_message")}
    calls = [c["tool_call"]["tool_call_id"] for c in run.of_type("message", "tool_call_message")]
    return [by_id[c] for c in calls if c in by_id]


def test_time_server_result_reaches_the_next_request(workdir: Path, tether_home: Path) -> None:
    write_settings(tether_home, {"mcpServers": {"time": TIME}})
    script = [{"tool_calls": [call("mcp__time__get_current_time", timezone="UTC")]}, {"text": "ok"}]
    run, bodies = run_turns(workdir, script, "--allowedTools", "mcp__time__get_current_time")
    assert run.code == 0, run.stderr
    offered = [t["name"] for t in bodies[0]["tools"]]
    assert {"mcp__time__get_current_time", "mcp__time__convert_time"} <= set(offered)
    assert returns(run)[0]["status"] == "success"
    assert '"timezone": "UTC"' in bodies[1]["messages"][-1]["content"][0]["content"]
    init = run.of_type("system")[0]
    assert {"name": "time", "status": "connected"}.items() <= init["mcp_servers"][0].items()


def test_mcp_tool_needs_approval_without_a_rule(workdir: Path, tether_home: Path) -> None:
    write_settings(tether_home, {"mcpServers": {"time": TIME}})
    script = [{"tool_calls": [call("mcp__time__get_current_time", timezone="UTC")]}, {"text": "ok"}]
    run, _ = run_turns(workdir, script)
    assert run.code == 0, run.stderr
    ret = returns(run)[0]
    assert ret["status"] == "error" and "requires approval" in ret["tool_return"]


@pytest.mark.parametrize("rule", ["mcp__git", "mcp__git__git_status"])
def test_deny_rule_blocks_a_git_tool(workdir: Path, tether_home: Path, rule: str) -> None:
    subprocess.run(["git", "init", "-q"], cwd=workdir, check=True)
    git = {"command": sys.executable, "args": ["-m", "mcp_server_git", "--repository", str(workdir)]}
    write_settings(tether_home, {"mcpServers": {"git": git}, "permissions": {"deny": [rule]}})
    script = [{"tool_calls": [call("mcp__git__git_status", repo_path=str(workdir))]}, {"text": "ok"}]
    run, _ = run_turns(workdir, script, "--yolo")
    assert run.code == 0, run.stderr
    ret = returns(run)[0]
    assert ret["status"] == "error" and "denied" in ret["tool_return"].lower(), ret


def test_untrusted_mcp_json_starts_nothing(workdir: Path, tether_home: Path) -> None:
    marker = workdir / "STARTED"
    starter = {"command": "sh", "args": ["-c", f"touch {marker}; exec sleep 30"]}
    (workdir / ".mcp.json").write_text(json.dumps({"mcpServers": {"evil": starter}}))
    run, _ = run_turns(workdir, [{"text": "ok"}])
    assert run.code == 0, run.stderr
    assert "not starting MCP server(s) evil" in run.stderr and "not trusted" in run.stderr
    assert not marker.exists()
    trusted, _ = run_turns(workdir, [{"text": "ok"}], "--trust")
    assert trusted.code == 0, trusted.stderr
    assert marker.exists()  # it started (and failed the MCP handshake, which is reported)
    init = trusted.of_type("system")[0]
    assert init["mcp_servers"][0]["status"] == "failed"


def test_a_server_that_crashes_mid_session_leaves_the_turn_working(workdir: Path, tether_home: Path) -> None:
    write_settings(tether_home, {"mcpServers": {"toy": toybox()}})
    script = [
        {"tool_calls": [call("mcp__toy__crash")]},
        {"tool_calls": [call("mcp__toy__echo", text="still there?")]},
        {"text": "carried on"},
    ]
    run, bodies = run_turns(workdir, script, "--yolo")
    assert run.code == 0, run.stderr
    crashed, after = returns(run)
    assert crashed["status"] == "error" and "toy" in crashed["tool_return"]
    assert after["status"] == "error"
    assert "mcp__toy__echo" not in [t["name"] for t in bodies[2]["tools"]]
    assert run.of_type("result")[0]["result"] == "carried on"


def test_tool_errors_and_resources(workdir: Path, tether_home: Path) -> None:
    write_settings(tether_home, {"mcpServers": {"toy": toybox()}})
    script = [
        {"tool_calls": [call("mcp__toy__shout", text="bad input"),
                        call("ListMcpResources"),
                        call("ReadMcpResource", server="toy", uri="toy://readme")]},
        {"text": "ok"},
    ]
    run, _ = run_turns(workdir, script, "--yolo")
    assert run.code == 0, run.stderr
    shout, listing, readme = returns(run)
    assert shout["status"] == "error" and "shout" in shout["tool_return"], shout
    assert "toy://readme" in listing["tool_return"]
    assert readme["tool_return"] == "the toybox readme"


def test_mcp_config_flag_inline_and_file(workdir: Path, tether_home: Path, tmp_path: Path) -> None:
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"toy": toybox()}}))
    inline = json.dumps({"mcpServers": {"time": TIME}})
    script = [{"tool_calls": [call("mcp__toy__echo", text="hi"),
                              call("mcp__time__get_current_time", timezone="UTC")]}, {"text": "ok"}]
    run, _ = run_turns(workdir, script, "--yolo", "--mcp-config", str(config), "--mcp-config", inline)
    assert run.code == 0, run.stderr
    assert [r["status"] for r in returns(run)] == ["success", "success"]


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("{not json", "--mcp-config: not valid JSON"),
        ('{"mcpServers": {"x": {"type": "ftp"}}}', 'mcpServers.x: "type" must be'),
        ('{"mcpServers": {"x": {"command": "a", "env": {"K": "${NOPE_UNSET}"}}}}', "${NOPE_UNSET} is not set"),
        ("/nonexistent/servers.json", "cannot read"),
    ],
)
def test_bad_mcp_config_is_a_clear_error(workdir: Path, value: str, says: str) -> None:
    run, _ = run_turns(workdir, [{"text": "never"}], "--mcp-config", value)
    assert run.code == 1
    assert says in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize(("mode", "kind", "path"), [("http", "http", "/mcp"), ("sse", "sse", "/sse")])
def test_remote_server(workdir: Path, tether_home: Path, mode: str, kind: str, path: str) -> None:
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "tests.mcp.servers.toybox", mode, str(port)],
                              cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port)
        write_settings(tether_home, {"mcpServers": {
            "web": {"type": kind, "url": f"http://127.0.0.1:{port}{path}"}}})
        script = [{"tool_calls": [call("mcp__web__echo", text=f"over {kind}")]}, {"text": "ok"}]
        run, _ = run_turns(workdir, script, "--yolo")
        assert run.code == 0, run.stderr
        assert returns(run)[0]["tool_return"] == f"over {kind}"
    finally:
        server.kill()
        server.wait()


def test_kill_9_leaves_no_server_process(workdir: Path, tether_home: Path) -> None:
    mark = uuid.uuid4().hex
    write_settings(tether_home, {"mcpServers": {"toy": toybox(mark=mark), "time": {
        **TIME, "env": {"TOYBOX_MARK": mark}}}})
    with FakeProvider([{"text": "slow", "delay_ms": 20_000}]) as fake:
        proc = subprocess.Popen([TETHER, "-p", "go", "--model", MODEL], cwd=workdir,
                                env=tether_env(fake.url, MODEL), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while not fake.requests and time.monotonic() < deadline:  # servers are up by then
                time.sleep(0.05)
            assert fake.requests, "tether never reached the model"
            assert len(_marked(mark)) >= 2, "the MCP servers were not running"
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
    deadline = time.monotonic() + 5
    while _marked(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _marked(mark) == []


def _marked(mark: str) -> list[int]:
    """Live processes whose environment carries `mark`."""
    found = []
    needle = f"TOYBOX_MARK={mark}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if needle in Path(f"/proc/{entry}/environ").read_bytes():
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry))
        except OSError:
            continue
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_port(port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"the toybox server never listened on {port}")


def test_mcp_subcommands_add_list_get_remove(workdir: Path, tether_home: Path) -> None:
    env = tether_env("http://127.0.0.1:9", MODEL)

    def tether(*args: str) -> Run:
        return run_tether(list(args), env=env, cwd=workdir, timeout=60)

    added = tether("mcp", "add", "time", "--scope", "user", "--", *[TIME["command"], *TIME["args"]])
    assert added.code == 0, added.stderr
    assert json.loads(added.stdout)["file"] == str(tether_home / "settings.json")
    web = tether("mcp", "add", "web", "-t", "http", "-H", "Authorization: Bearer s3cret",
                 "http://127.0.0.1:9/mcp")
    assert web.code == 0, web.stderr
    listed = {s["name"]: s for s in json.loads(tether("mcp", "list").stdout)}
    assert listed["time"]["status"] == "connected"
    assert "get_current_time" in listed["time"]["tools"]
    assert listed["web"]["status"] == "held_back"  # a project (local) server, untrusted folder
    assert "s3cret" not in json.dumps(listed)
    got = tether("mcp", "get", "time")
    assert json.loads(got.stdout)["name"] == "time"
    assert tether("mcp", "remove", "web").code == 0
    assert "web" not in {s["name"] for s in json.loads(tether("mcp", "list").stdout)}
    missing = tether("mcp", "get", "web")
    assert missing.code == 1 and "no MCP server named 'web'" in missing.stderr
    bad = tether("mcp", "add", "x", "-e", "NOEQUALS", "--", "cmd")
    assert bad.code == 1 and "KEY=VALUE" in bad.stderr


def test_subagents_inherit_the_parents_servers_and_deny_rules(workdir: Path, tether_home: Path) -> None:
    write_settings(tether_home, {"permissions": {"deny": ["mcp__toy__shout"]}})
    config = json.dumps({"mcpServers": {"toy": toybox()}})
    agent = {"name": "Agent", "arguments": {"description": "delegate", "prompt": "use the toybox",
                                            "subagent_type": "general-purpose"}}
    script = [
        {"tool_calls": [agent]},  # parent
        {"tool_calls": [call("mcp__toy__echo", text="from the child"),  # child
                        call("mcp__toy__shout", text="denied")]},
        {"text": "child done"},  # child
        {"text": "parent done"},  # parent
    ]
    run, bodies = run_turns(workdir, script, "--yolo", "--mcp-config", config)
    assert run.code == 0, run.stderr
    child_tools = {t["name"] for t in bodies[1]["tools"]}
    assert "mcp__toy__echo" in child_tools
    child_results = json.dumps(bodies[2]["messages"][-1])
    assert "from the child" in child_results
    assert "Permission denied by rule: mcp__toy__shout" in child_results


@pytest.mark.parametrize(("opt_in", "status"), [(False, "error"), (True, "success")])
def test_read_only_hint_admits_only_when_opted_in(workdir: Path, tether_home: Path,
                                                  opt_in: bool, status: str) -> None:
    server = {**TIME, "autoAllowReadOnly": opt_in}  # mcp-server-time marks its tools read-only
    write_settings(tether_home, {"mcpServers": {"time": server}})
    script = [{"tool_calls": [call("mcp__time__get_current_time", timezone="UTC")]}, {"text": "ok"}]
    run, _ = run_turns(workdir, script)
    assert run.code == 0, run.stderr
    assert returns(run)[0]["status"] == status, returns(run)[0]


def test_server_rule_allows_every_tool_of_the_server(workdir: Path, tether_home: Path) -> None:
    write_settings(tether_home, {"mcpServers": {"toy": toybox()}, "permissions": {"allow": ["mcp__toy"]}})
    script = [{"tool_calls": [call("mcp__toy__echo", text="a"), call("mcp__toy__whoami")]}, {"text": "ok"}]
    run, _ = run_turns(workdir, script)
    assert run.code == 0, run.stderr
    assert [r["status"] for r in returns(run)] == ["success", "success"]


def test_stream_json_initialize_reports_servers_and_refuses_to_add_any(workdir: Path) -> None:
    from tests.e2e.test_bidirectional import Client

    config = json.dumps({"mcpServers": {"time": TIME}})
    with FakeProvider([{"text": "unused"}]) as fake:
        c = Client(fake.url, workdir, "--mcp-config", config)
        init = c.wait_for(lambda e: e["type"] == "system", timeout=60)
        assert init["mcp_servers"][0]["status"] == "connected"
        assert "mcp__time__get_current_time" in init["tools"]
        c.send({"type": "control_request", "request_id": "i1", "request": {"subtype": "initialize"}})
        ok = c.wait_for(lambda e: e["type"] == "control_response")["response"]
        assert ok["response"]["mcp_servers"][0]["name"] == "time"
        c.send({"type": "control_request", "request_id": "i2",
                "request": {"subtype": "initialize", "mcp_servers": {"x": {"command": "evil"}}}})
        refused = c.wait_for(lambda e: e["type"] == "control_response")["response"]
        assert refused["subtype"] == "error" and "cannot add MCP servers" in refused["error"]
        assert c.close() == 0
