"""End to end: mods in $TETHER_HOME/mods (and the project, and the agent) in the real `tether`."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from tests.e2e.support import Run, run_tether, tether_env
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"




def write_mod(folder: Path, name: str, source: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    return path


def run_with(
    workdir: Path, script: list[Any], *flags: str, extra_env: dict[str, str] | None = None
) -> tuple[Run, list[dict[str, Any]]]:
    with FakeProvider(script) as fake:
        run = run_tether(["-p", "go", "--model", MODEL, "--output-format", "stream-json", *flags],
                         env=tether_env(fake.url, MODEL, extra_env), cwd=workdir)
        assert fake.violations == []
        return run, [r["body"] for r in fake.requests]


SHOUT = """
    class Shout:
        name = "Shout"
        description = "Upper-cases the text"
        parameters = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}

        async def run(self, args, ctx):
            return {"content": [{"type": "text", "text": args["text"].upper()}], "status": "success"}

    def activate(api):
        api.tools.register(Shout(), approval_policy="auto")
"""


def test_a_mod_tool_is_offered_and_called_by_the_model(workdir: Path, tether_home: Path) -> None:
    write_mod(tether_home / "mods", "shout", SHOUT)
    script = [{"tool_calls": [{"name": "Shout", "arguments": {"text": "quiet words"}}]}, {"text": "done"}]
    run, bodies = run_with(workdir, script)  # standard mode: approval_policy auto needs no approval
    assert run.code == 0, run.stderr
    assert "Shout" in run.events[0]["tools"]
    assert "Shout" in {t["name"] for t in bodies[0]["tools"]}
    ret = run.of_type("message", "tool_return_message")[0]
    assert ret["status"] == "success" and ret["tool_return"] == "QUIET WORDS"
    assert "QUIET WORDS" in json.dumps(bodies[1])


def test_a_mod_tool_without_auto_policy_still_needs_approval(workdir: Path, tether_home: Path) -> None:
    write_mod(tether_home / "mods", "shout", SHOUT.replace('approval_policy="auto"', 'approval_policy="ask"'))
    script = [{"tool_calls": [{"name": "Shout", "arguments": {"text": "x"}}]}, {"text": "done"}]
    run, _ = run_with(workdir, script)
    ret = run.of_type("message", "tool_return_message")[0]
    assert ret["status"] == "error" and "requires approval" in ret["tool_return"]


def test_a_permission_mod_denies_a_call_even_in_yolo(workdir: Path, tether_home: Path) -> None:
    write_mod(tether_home / "mods", "guard", """
        def activate(api):
            def check(event):
                if event["toolName"] == "Bash" and "rm " in event["args"].get("command", ""):
                    return {"decision": "deny", "reason": "guard mod: no rm"}
                return None
            api.permissions.register("no-rm", check)
    """)
    (workdir / "keep.txt").write_text("x")
    script = [{"tool_calls": [{"name": "Bash", "arguments": {"command": "rm keep.txt", "description": "rm"}}]},
              {"text": "ok"}]
    run, bodies = run_with(workdir, script, "--yolo")
    assert run.code == 0, run.stderr
    ret = run.of_type("message", "tool_return_message")[0]
    assert ret["status"] == "error" and "guard mod: no rm" in ret["tool_return"]
    assert (workdir / "keep.txt").exists() and "guard mod: no rm" in json.dumps(bodies[1])


def test_turn_end_continuation_is_stopped_by_max_turns(workdir: Path, tether_home: Path) -> None:
    write_mod(tether_home / "mods", "again", """
        def activate(api):
            api.events.on("turn_end", lambda event: {"continue": "keep going"})
    """)
    script = [{"text": f"answer {n}"} for n in range(6)]
    run, bodies = run_with(workdir, script, "--max-turns", "3")
    assert run.code == 1
    assert len(bodies) == 3
    assert "keep going" in json.dumps(bodies[1]["messages"][-1])
    errors = [e for e in run.events if e.get("type") == "error" or e.get("message_type") == "error_message"]
    assert any("Maximum turns limit reached (3/3 steps)" in json.dumps(e) for e in errors), run.stdout


def test_turn_end_continuation_until_the_mod_stops(workdir: Path, tether_home: Path) -> None:
    write_mod(tether_home / "mods", "twice", """
        sent = []

        def activate(api):
            def on_end(event, ctx):
                assert ctx.mod == "twice"
                if len(sent) < 2:
                    sent.append(event["assistantMessage"])
                    return {"continue": f"continue after {event['assistantMessage']}"}
            api.events.on("turn_end", on_end)
    """)
    run, bodies = run_with(workdir, [{"text": "one"}, {"text": "two"}, {"text": "three"}])
    assert run.code == 0, run.stderr
    assert len(bodies) == 3 and "continue after two" in json.dumps(bodies[2])
    assert run.events[-1]["result"] == "three" and run.events[-1]["num_turns"] == 3


def test_a_mod_failing_in_activate_leaves_no_registrations(workdir: Path, tether_home: Path) -> None:
    write_mod(tether_home / "mods", "broken", """
        class Half:
            name = "Half"
            description = "never offered"
            parameters = {"type": "object", "properties": {}}
            def run(self, args, ctx):
                return "no"

        def activate(api):
            api.tools.register(Half(), approval_policy="auto")
            raise RuntimeError("boom in activate")
    """)
    write_mod(tether_home / "mods", "shout", SHOUT)
    run, bodies = run_with(workdir, [{"text": "fine"}])
    assert run.code == 0, run.stderr
    assert "tether: mod broken failed in activate: RuntimeError: boom in activate" in run.stderr
    tools = {t["name"] for t in bodies[0]["tools"]}
    assert "Half" not in tools and "Shout" in tools  # the other mod keeps working


def test_a_mod_failing_to_import_or_in_an_event_is_reported(workdir: Path, tether_home: Path) -> None:
    write_mod(tether_home / "mods", "syntax", "def activate(api)\n    pass\n")
    write_mod(tether_home / "mods", "flaky", """
        def activate(api):
            api.events.on("turn_start", lambda event: 1 / 0)
    """)
    run, _ = run_with(workdir, [{"text": "still answered"}])
    assert run.code == 0, run.stderr
    assert "tether: mod syntax failed in import: SyntaxError" in run.stderr
    assert "tether: mod flaky failed in event: RuntimeError: turn_start handler: ZeroDivisionError" in run.stderr
    assert run.events[-1]["result"] == "still answered"


def test_turn_start_rewrites_or_cancels_the_input(workdir: Path, tether_home: Path) -> None:
    write_mod(tether_home / "mods", "rewrite", """
        def activate(api):
            api.events.on("turn_start", lambda e: {"input": e["input"] + " (and be brief)"})
    """)
    run, bodies = run_with(workdir, [{"text": "ok"}])
    assert run.code == 0, run.stderr
    assert "go (and be brief)" in json.dumps(bodies[0]["messages"][-1])
    write_mod(tether_home / "mods", "rewrite", """
        def activate(api):
            api.events.on("turn_start", lambda e: {"cancel": {"reason": "not today"}})
    """)
    run, bodies = run_with(workdir, [{"text": "never"}])
    assert bodies == [] and run.code == 1  # a refusal, not an interrupt (the reference: exit 1)
    assert "Turn cancelled by mod rewrite: not today" in run.stdout


def test_tool_start_short_circuits_and_tool_end_replaces(workdir: Path, tether_home: Path) -> None:
    write_mod(tether_home / "mods", "tools", """
        def activate(api):
            def start(event):
                if event["args"].get("command") == "echo fake":
                    return {"result": "answered by the mod"}
                if event["args"].get("command") == "echo original":
                    return {"args": {**event["args"], "command": "echo rewritten > r.txt"}}
            api.events.on("tool_start", start)
            api.events.on("tool_end", lambda e: {"result": e["output"] + " [seen by tool_end]"}
                          if e["toolName"] == "Bash" else None)
    """)
    script = [{"tool_calls": [
        {"name": "Bash", "arguments": {"command": "echo fake > f.txt", "description": "a"}},
    ]}, {"tool_calls": [
        {"name": "Bash", "arguments": {"command": "echo fake", "description": "b"}},
        {"name": "Bash", "arguments": {"command": "echo original", "description": "c"}},
    ]}, {"text": "ok"}]
    run, _ = run_with(workdir, script, "--yolo")
    assert run.code == 0, run.stderr
    returns = [r["tool_return"] for r in run.of_type("message", "tool_return_message")]
    assert returns[0].endswith(") [seen by tool_end]") and (workdir / "f.txt").exists()
    assert returns[1] == "answered by the mod [seen by tool_end]"
    assert (workdir / "r.txt").read_text() == "rewritten\n"


def test_mods_off_with_flag_or_env(workdir: Path, tether_home: Path) -> None:
    write_mod(tether_home / "mods", "shout", SHOUT)
    run, bodies = run_with(workdir, [{"text": "x"}], "--no-mods")
    assert run.code == 0 and "Shout" not in {t["name"] for t in bodies[0]["tools"]}
    run, bodies = run_with(workdir, [{"text": "x"}], extra_env={"TETHER_DISABLE_MODS": "1"})
    assert run.code == 0 and "Shout" not in {t["name"] for t in bodies[0]["tools"]}
    run, bodies = run_with(workdir, [{"text": "x"}], extra_env={"TETHER_MODS_DIR": str(workdir / "none")})
    assert run.code == 0 and "Shout" not in {t["name"] for t in bodies[0]["tools"]}


def test_project_mods_need_trust_and_shadow_global_ones(workdir: Path, tether_home: Path) -> None:
    write_mod(tether_home / "mods", "shout", SHOUT)
    write_mod(workdir / ".tether" / "mods", "shout", SHOUT.replace("Upper-cases the text", "project shout"))
    run, bodies = run_with(workdir, [{"text": "x"}])
    assert run.code == 0 and "project mod(s)" in run.stderr and "not trusted" in run.stderr
    assert {t["name"]: t["description"] for t in bodies[0]["tools"]}["Shout"] == "Upper-cases the text"
    run, bodies = run_with(workdir, [{"text": "x"}], "--trust")
    assert run.code == 0, run.stderr
    assert {t["name"]: t["description"] for t in bodies[0]["tools"]}["Shout"] == "project shout"


def test_agent_memory_mods_load_for_that_agent(workdir: Path, tether_home: Path) -> None:
    run, _ = run_with(workdir, [{"text": "first"}])
    agent = run.events[0]["agent_id"]
    write_mod(tether_home / "agents" / agent / "memory" / "mods", "shout", SHOUT)
    run, bodies = run_with(workdir, [{"text": "again"}], "--agent", agent)
    assert run.code == 0, run.stderr
    assert "Shout" in {t["name"] for t in bodies[0]["tools"]}


def test_mods_cli_list_disable_enable_remove(workdir: Path, tether_home: Path) -> None:
    env = tether_env("http://127.0.0.1:9", MODEL)
    path = write_mod(tether_home / "mods", "shout", SHOUT)
    write_mod(tether_home / "mods", ".hidden", SHOUT)
    listed = json.loads(run_tether(["mods", "list", "--json"], env=env, cwd=workdir).stdout)
    assert [(r["name"], r["source"], r["status"]) for r in listed] == [("shout", "global", "enabled")]
    assert run_tether(["mods", "disable", "shout"], env=env, cwd=workdir).code == 0
    assert json.loads((tether_home / "mods" / "state.json").read_text()) == {"disabled": ["shout"]}
    with FakeProvider([{"text": "x"}]) as fake:
        run = run_tether(["-p", "go", "--model", MODEL, "--output-format", "stream-json"],
                         env=tether_env(fake.url, MODEL), cwd=workdir)
        assert run.code == 0, run.stderr
        assert "Shout" not in {t["name"] for t in fake.requests[0]["body"]["tools"]}
    text = run_tether(["mods", "list"], env=env, cwd=workdir).stdout
    assert "shout\tglobal\tdisabled" in text
    assert run_tether(["mods", "enable", "shout"], env=env, cwd=workdir).code == 0
    assert run_tether(["mods", "disable", "nosuch"], env=env, cwd=workdir).code == 1
    refused = run_tether(["mods", "remove", "shout"], env=env, cwd=workdir)
    assert refused.code == 1 and "--yes" in refused.stderr and path.exists()
    assert run_tether(["mods", "remove", "shout", "--yes"], env=env, cwd=workdir).code == 0
    assert not path.exists()


def test_hooks_list_names_each_hook_its_file_and_trust(workdir: Path, tether_home: Path) -> None:
    env = tether_env("http://127.0.0.1:9", MODEL)
    tether_home.mkdir(parents=True, exist_ok=True)
    (tether_home / "settings.json").write_text(json.dumps({"hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "exit 0"}]}],
    }}))
    (workdir / ".tether").mkdir()
    (workdir / ".tether" / "settings.json").write_text(json.dumps({"hooks": {
        "Stop": [{"hooks": [{"type": "prompt", "prompt": "judge $ARGUMENTS", "timeout": 5}]}],
    }}))
    rows = json.loads(run_tether(["hooks", "list", "--json"], env=env, cwd=workdir).stdout)
    by_event = {r["event"]: r for r in rows}
    assert by_event["PreToolUse"]["source"] == str(tether_home / "settings.json")
    assert by_event["PreToolUse"]["applies"] == "yes" and by_event["PreToolUse"]["matcher"] == "Bash"
    assert by_event["Stop"]["type"] == "prompt" and by_event["Stop"]["timeout"] == 5
    assert by_event["Stop"]["applies"].startswith("no (folder not trusted")
    assert run_tether(["trust"], env=env, cwd=workdir).code == 0
    rows = json.loads(run_tether(["hooks", "list", "--json"], env=env, cwd=workdir).stdout)
    assert {r["event"]: r["applies"] for r in rows}["Stop"] == "yes"
    assert "PreToolUse\tBash\texit 0" in run_tether(["hooks", "list"], env=env, cwd=workdir).stdout


def test_a_mod_provider_serves_a_model_handle(workdir: Path, tether_home: Path) -> None:
    write_mod(tether_home / "mods", "echo_provider", """
        from tether.protocol.chunks import AssistantText, StopReason, UsageStatistics
        from tether.protocol.messages import Usage

        class Echo:
            api = "mod-echo"
            endpoint = None

            def __init__(self, model):
                self.model = model

            async def stream(self, request):
                said = request.messages[-1].content[0].text
                yield AssistantText("otid-1", f"{self.model} heard: {said}")
                yield UsageStatistics(Usage(input_tokens=3, output_tokens=4))
                yield StopReason("end_turn")

        def activate(api):
            api.providers.register("echo", Echo)
    """)
    env = tether_env("http://127.0.0.1:9", "anthropic/claude-test")
    run = run_tether(["-p", "ping", "--model", "echo/parrot-1"], env=env, cwd=workdir)
    assert run.code == 0, run.stderr
    assert run.stdout == "parrot-1 heard: ping\n"
    missing = run_tether(["-p", "ping", "--model", "nosuch/x"], env=env, cwd=workdir)
    assert missing.code == 1 and "'nosuch' is not a provider" in missing.stderr
    off = run_tether(["-p", "ping", "--model", "echo/x", "--no-mods"], env=env, cwd=workdir)
    assert off.code == 1 and "mods are off" in off.stderr
