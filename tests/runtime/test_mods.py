"""The mod engine in-process: discovery, failures by phase, permissions, events, generations."""

from __future__ import annotations

import asyncio
import sys
import textwrap
import threading
import types
from pathlib import Path
from typing import Any

import pytest

from tether.core.approvals import JudgedCall
from tether.core.execution import PreToolVerdict
from tether.core.permissions import Decision
from tether.core.tools import Effect, ToolContext, ToolRegistry, ToolResult
from tether.protocol.messages import ImagePart, TextPart, UserMessage
from tether.protocol.tool_calls import ToolCall, ToolReturn
from tether.runtime.extensions.hooks import HookConfig, HookRunner, merge_hooks, parse_hooks
from tether.runtime.extensions.mods import ModSession, combine_decision
from tether.runtime.extensions.mods.api import ModApi, ModHost, capabilities_for
from tether.runtime.extensions.mods.engine import (
    Diagnostic,
    ModEngine,
    discover,
    read_disabled,
    write_disabled,
)
from tether.runtime.extensions.turn_hooks import TurnHooks


def _judged(cid: str, name: str, tool: Any, args: dict[str, Any]) -> JudgedCall:
    return JudgedCall.of(ToolCall(cid, name, args), tool, Decision("allow", "test"))



class Builtin:
    name = "Read"
    description = "built in"
    parameters: dict[str, Any] = {"type": "object", "properties": {}}
    effect = Effect.READ

    def paths(self, args: Any, cwd: Path) -> list[Path]:
        return []

    async def run(self, args: Any, ctx: Any) -> ToolResult:
        return ToolResult("builtin")


class Setup:
    def __init__(self, root: Path, *, profile: str | None = None, trusted: bool = False, agent: str | None = None) -> None:
        self.home = root / "home"
        self.cwd = root / "cwd"
        self.cwd.mkdir(parents=True, exist_ok=True)
        self.mods = self.home / "mods"
        self.mods.mkdir(parents=True, exist_ok=True)
        self.registry = ToolRegistry()
        self.registry.register(Builtin())
        self.diagnostics: list[Diagnostic] = []
        self.host = ModHost(lambda: self.registry, self.cwd, agent, "conv-1", capabilities_for(profile))
        self.engine = ModEngine(
            lambda: discover(self.home, self.cwd, {}, agent_id=agent, project_trusted=trusted),
            lambda eng, owner: ModApi(eng, owner, self.host),
            report=self.diagnostics.append,
        )
        self.session = ModSession(self.engine, self.host, model="anthropic/claude-test")

    def write(self, name: str, source: str, folder: Path | None = None) -> Path:
        path = (folder or self.mods) / f"{name}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
        return path


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    return Setup(tmp_path)


def tool_mod(name: str, *, extra: str = "", policy: str = "auto") -> str:
    return f"""
        class T:
            name = {name!r}
            description = "from a mod"
            parameters = {{"type": "object", "properties": {{}}}}
            def run(self, args, ctx):
                return "ran {name}"

        def activate(api):
            api.tools.register(T(), approval_policy={policy!r})
            {extra}
    """


# --- discovery -----------------------------------------------------------------------------


def test_discovery_sources_shadowing_packages_and_dot_files(tmp_path: Path) -> None:
    s = Setup(tmp_path, trusted=True, agent="agent-1")
    s.write("alpha", "def activate(api): pass")
    s.write(".hidden", "def activate(api): pass")
    (s.mods / "notes.txt").write_text("not a mod")
    pkg = s.mods / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .helper import activate\n")
    (pkg / "helper.py").write_text("def activate(api):\n    api.diagnostics.report('pkg loaded')\n")
    (s.mods / "nopkg").mkdir()  # a directory without __init__.py is not a mod
    s.write("alpha", "def activate(api): pass", s.home / "agents" / "agent-1" / "memory" / "mods")
    s.write("alpha", "def activate(api): pass", s.cwd / ".tether" / "mods")
    found = discover(s.home, s.cwd, {}, agent_id="agent-1", project_trusted=True)
    assert [(m.name, m.source) for m in found.active] == [("pkg", "global"), ("alpha", "project")]
    assert {(a.source, b.source) for a, b in found.shadowed} == {("global", "agent"), ("agent", "project")}
    s.engine.load()
    assert [d.message for d in s.diagnostics] == ["pkg loaded"]  # the package's relative import worked


def test_untrusted_project_mods_are_skipped_with_a_note(setup: Setup) -> None:
    setup.write("proj", "def activate(api): pass", setup.cwd / ".tether" / "mods")
    found = discover(setup.home, setup.cwd, {}, agent_id=None, project_trusted=False)
    assert found.active == () and "not trusted" in found.notes[0]


def test_env_mods_dir_and_disabled_state(setup: Setup, tmp_path: Path) -> None:
    other = tmp_path / "elsewhere"
    setup.write("away", "def activate(api): pass", other)
    setup.write("here", "def activate(api): pass")
    found = discover(setup.home, setup.cwd, {"TETHER_MODS_DIR": str(other)}, agent_id=None, project_trusted=False)
    assert [m.name for m in found.active] == ["away"]
    write_disabled(setup.home, ["here"])
    assert read_disabled(setup.home) == ["here"]
    found = discover(setup.home, setup.cwd, {}, agent_id=None, project_trusted=False)
    assert found.active == () and [m.name for m in found.disabled] == ["here"]


def test_entry_points_are_a_source(setup: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("tether_test_ep_mod")
    module.activate = lambda api: api.diagnostics.report("from an entry point")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tether_test_ep_mod", module)

    class EP:
        name = "epmod"
        value = "tether_test_ep_mod:activate"

    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [EP()] if group == "tether.mods" else [])
    setup.engine.load()
    assert [(o.name, o.spec.source) for o in setup.engine.owners] == [("epmod", "installed")]
    assert setup.diagnostics[0].message == "from an entry point"


# --- failures --------------------------------------------------------------------------------


def test_activate_failure_removes_every_registration_of_that_mod_only(setup: Setup) -> None:
    setup.write("bad", tool_mod("BadTool", extra="""api.permissions.register("p", lambda e: "deny")
            api.events.on("turn_start", lambda e: None)
            api.providers.register("badprov", lambda model: None)
            raise ValueError("nope")"""))
    setup.write("good", tool_mod("GoodTool"))
    setup.engine.load()
    assert sorted(setup.registry.names()) == ["GoodTool", "Read"]
    assert [o.name for o in setup.engine.owners] == ["good"]
    assert setup.engine.provider("badprov") is None
    (diag,) = setup.diagnostics
    assert (diag.mod, diag.phase) == ("bad", "activate") and diag.line() == "tether: mod bad failed in activate: ValueError: nope"


def test_import_failure_and_missing_activate(setup: Setup) -> None:
    setup.write("broken", "import not_a_module_anywhere_xyz\n")
    setup.write("empty", "x = 1\n")
    setup.engine.load()
    assert {(d.mod, d.phase) for d in setup.diagnostics} == {("broken", "import"), ("empty", "import")}
    assert "ModuleNotFoundError" in next(d.message for d in setup.diagnostics if d.mod == "broken")
    assert setup.engine.owners == []


def test_event_failure_disables_the_mod_and_sets_its_signal(setup: Setup) -> None:
    setup.write("flaky", tool_mod("Flaky", extra="""api.events.on("turn_end", lambda e: 1 / 0)
            import builtins; builtins._flaky_signal = api.signal"""))
    setup.write("steady", """
        def activate(api):
            api.events.on("turn_end", lambda e: {"continue": "steady says go"})
    """)
    setup.engine.load()
    outcome = types.SimpleNamespace(stop_reason="end_turn", last_text="hi")
    follow = asyncio.run(setup.session.turn_end(outcome))  # type: ignore[arg-type]
    assert follow == "steady says go"
    assert [(d.mod, d.phase) for d in setup.diagnostics] == [("flaky", "event")]
    assert "Flaky" not in setup.registry.names()
    import builtins

    assert builtins._flaky_signal.is_set()  # type: ignore[attr-defined]
    del builtins._flaky_signal  # type: ignore[attr-defined]


def test_dispose_failure_is_a_diagnostic_and_reload_still_happens(setup: Setup) -> None:
    setup.write("leaky", tool_mod("Leaky", extra="""def bye():
                raise OSError("cannot let go")
            return bye"""))
    assert setup.engine.load() == 1
    assert setup.engine.reload() == 2
    assert [(d.mod, d.phase, d.generation) for d in setup.diagnostics] == [("leaky", "dispose", 1)]
    assert "Leaky" in setup.registry.names() and setup.engine.owners[0].generation == 2


def test_builtin_names_need_override_and_disposers_restore_them(setup: Setup) -> None:
    setup.write("shadow", tool_mod("Read"))
    setup.engine.load()
    assert setup.diagnostics[0].phase == "activate" and "override=True" in setup.diagnostics[0].message
    setup.write("shadow", """
        class T:
            name = "Read"
            description = "mod read"
            parameters = {"type": "object", "properties": {}}
            def run(self, args, ctx):
                return "mod"
        def activate(api):
            api.tools.register(T(), override=True)
    """)
    setup.engine.reload()
    assert setup.registry.get("Read").description == "mod read"  # type: ignore[union-attr]
    setup.engine.dispose_all()
    assert setup.registry.get("Read").description == "built in"  # type: ignore[union-attr]


def test_providers_only_profile_keeps_providers(tmp_path: Path) -> None:
    s = Setup(tmp_path, profile="providers-only")
    s.write("prov", """
        def activate(api):
            assert api.capabilities == {"providers"}
            api.providers.register("mine", lambda model: ("provider for", model))
    """)
    s.write("tooly", tool_mod("Nope"))
    s.engine.load()
    assert s.engine.provider("mine")("m1") == ("provider for", "m1")  # type: ignore[misc]
    assert [(d.mod, d.phase) for d in s.diagnostics] == [("tooly", "activate")]
    assert "capability 'tools'" in s.diagnostics[0].message


def test_every_register_returns_a_disposer(setup: Setup) -> None:
    setup.write("undo", """
        def activate(api):
            class T:
                name = "Temp"
                description = ""
                parameters = {"type": "object", "properties": {}}
                def run(self, args, ctx):
                    return ""
            undo_tool = api.tools.register(T())
            undo_perm = api.permissions.register("p", lambda e: "deny")
            undo_prov = api.providers.register("tmp", lambda m: None)
            handler = lambda e: None
            api.events.on("llm_start", handler)
            undo_tool(); undo_perm(); undo_prov(); undo_tool()
            api.events.off("llm_start", handler)
    """)
    setup.engine.load()
    owner = setup.engine.owners[0]
    assert "Temp" not in setup.registry.names() and owner.checks == [] and owner.disposers == []
    assert setup.engine.provider("tmp") is None and not setup.engine.has_handlers("llm_start")


# --- permissions -----------------------------------------------------------------------------

ALLOW = Decision("allow", "rule")
ASK = Decision("ask", "default")
ALWAYS = Decision("ask", "always", "Bash", sticky=True)
DENY = Decision("deny", "denied by rule")


@pytest.mark.parametrize(
    ("current", "answer", "verdict", "sticky"),
    [
        (DENY, "allow", "deny", False), (DENY, "ask", "deny", False), (DENY, "alwaysAsk", "deny", False),
        (ALWAYS, "allow", "ask", True), (ALWAYS, "ask", "ask", True), (ALWAYS, "deny", "deny", False),
        (ASK, "allow", "allow", False), (ASK, "alwaysAsk", "ask", True), (ASK, "deny", "deny", False),
        (ALLOW, "ask", "ask", False), (ALLOW, "alwaysAsk", "ask", True), (ALLOW, "deny", "deny", False),
        (ALLOW, "allow", "allow", False),
    ],
)
def test_combine_decision_tightens_freely_and_lifts_only_a_plain_ask(
    current: Decision, answer: str, verdict: str, sticky: bool
) -> None:
    out = combine_decision(current, answer, "why")
    assert (out.verdict, out.sticky) == (verdict, sticky)


def ctx_for(setup: Setup, mode: str = "standard") -> ToolContext:
    return ToolContext("ctx-1", setup.registry.tools(), setup.cwd, mode)


def test_permission_checks_wrap_decide_and_a_crashing_check_denies(setup: Setup) -> None:
    setup.write("perm", """
        def activate(api):
            def check(event, ctx):
                if event["args"].get("explode"):
                    raise RuntimeError("bug")
                if event["args"].get("path") == "secret":
                    return {"decision": "deny", "reason": "secret is off limits"}
                if event["decision"] == "ask":
                    return "allow"
            api.permissions.register("perm", check)
    """)
    setup.engine.load()
    guarded = setup.session.guard(lambda tool, args, ctx: ASK)
    read = setup.registry.get("Read")
    assert read is not None
    assert guarded(read, {}, ctx_for(setup)).verdict == "allow"
    assert guarded(read, {"path": "secret"}, ctx_for(setup)).reason == "secret is off limits"
    assert setup.session.guard(lambda t, a, c: DENY)(read, {}, ctx_for(setup)).verdict == "deny"
    assert setup.session.guard(lambda t, a, c: ALWAYS)(read, {}, ctx_for(setup)).verdict == "ask"
    crashed = guarded(read, {"explode": True}, ctx_for(setup))
    assert crashed.verdict == "deny" and "failed" in crashed.reason
    assert setup.diagnostics[0].phase == "event" and setup.engine.owners == []
    assert guarded(read, {}, ctx_for(setup)).verdict == "ask"  # the failed mod no longer answers


def test_tool_approval_policies(setup: Setup) -> None:
    setup.write("auto", tool_mod("AutoTool", policy="auto"))
    setup.write("always", tool_mod("AlwaysTool", policy="alwaysAsk"))
    setup.engine.load()
    auto, always = setup.registry.get("AutoTool"), setup.registry.get("AlwaysTool")
    assert auto is not None and always is not None
    plain = setup.session.guard(lambda t, a, c: ASK)
    assert plain(auto, {}, ctx_for(setup)).verdict == "allow"
    assert plain(auto, {}, ctx_for(setup, "strict")).verdict == "ask"
    by_rule = setup.session.guard(lambda t, a, c: Decision("ask", "ask rule", "AutoTool"))
    assert by_rule(auto, {}, ctx_for(setup)).verdict == "ask"
    unrestricted = setup.session.guard(lambda t, a, c: ALLOW)
    decided = unrestricted(always, {}, ctx_for(setup, "unrestricted"))
    assert decided.verdict == "ask" and decided.sticky


# --- events ----------------------------------------------------------------------------------


def test_turn_start_rewrites_in_order_keeps_images_and_cancels(setup: Setup) -> None:
    setup.write("a_first", """
        def activate(api):
            api.events.on("conversation_open", lambda e: api.diagnostics.report("open " + e["reason"]))
            api.events.on("turn_start", lambda e: {"input": e["input"] + " +a"})
    """)
    setup.write("b_second", """
        def activate(api):
            api.events.on("turn_start", lambda e: {"input": e["input"] + " +b"})
    """)
    setup.engine.load()
    user = UserMessage("u1", (TextPart("hi"), ImagePart("AAAA", "image/png")), 1)
    out = asyncio.run(setup.session.turn_start(user))
    assert isinstance(out, UserMessage)
    assert out.content == (TextPart("hi +a +b"), ImagePart("AAAA", "image/png"))
    assert [d.message for d in setup.diagnostics] == ["open startup"]
    setup.write("b_second", """
        async def cancel(event):
            return {"cancel": {"reason": "quota"}}
        def activate(api):
            api.events.on("turn_start", cancel)
    """)
    setup.session.reload()
    assert asyncio.run(setup.session.turn_start(user)) == "Turn cancelled by mod b_second: quota"
    assert [d.message for d in setup.diagnostics] == ["open startup", "open reload"]


def test_tool_start_and_tool_end_around_the_settings_hooks(setup: Setup) -> None:
    setup.write("tools", """
        def activate(api):
            def start(e):
                if e["args"].get("x") == "short":
                    return {"result": {"output": "short-circuited", "isError": True}}
                return {"args": {**e["args"], "x": "rewritten"}}
            api.events.on("tool_start", start)
            api.events.on("tool_end", lambda e: {"result": e["output"].upper()})
    """)
    setup.engine.load()
    seen: list[Any] = []

    class Inner:
        async def before(self, call: JudgedCall) -> PreToolVerdict:
            seen.append(dict(call.args))
            return PreToolVerdict(updated_args={"y": 1})

        async def after(self, call: JudgedCall, result: ToolReturn) -> str | None:
            seen.append(result.output)
            return "hook note"

    from tether.runtime.extensions.mods import ModToolHooks

    hooks = ModToolHooks(setup.session, Inner())
    call = _judged("t1", "Read", setup.registry.get("Read"), {"x": "orig"})
    verdict = asyncio.run(hooks.before(call))
    assert verdict.updated_args == {"x": "rewritten", "y": 1} and seen == [{"x": "rewritten"}]
    short = asyncio.run(hooks.before(_judged("t2", "Read", None, {"x": "short"})))
    assert short.result == ToolResult("short-circuited", True)
    after = asyncio.run(hooks.after(call, ToolReturn("t1", "Read", "out", False)))
    assert isinstance(after, ToolReturn) and after.output == "OUT\n\nhook note" and seen[-1] == "OUT"


def test_llm_events_and_handlers_with_two_arguments(setup: Setup) -> None:
    setup.write("llm", """
        seen = []
        def activate(api):
            api.events.on("llm_start", lambda e, ctx: seen.append(("start", e["model"], e["messageCount"], ctx.mod)))
            async def end(e):
                seen.append(("end", e["stopReason"], e["usage"]["inputTokens"]))
            api.events.on("llm_end", end)
            api.diagnostics.report(repr(id(seen)))
            import builtins; builtins._llm_seen = seen
    """)
    setup.engine.load()
    setup.session.message_count = lambda: 4
    from tether.protocol.chunks import StopReason
    from tether.protocol.messages import Usage
    from tether.protocol.turns import TurnInput

    asyncio.run(setup.session.llm_start(TurnInput()))
    outcome = types.SimpleNamespace(usage=Usage(7, 3), stop_reason="end_turn", error=None)
    asyncio.run(setup.session.llm_end(StopReason("end_turn"), outcome))  # type: ignore[arg-type]
    import builtins

    assert builtins._llm_seen == [("start", "anthropic/claude-test", 4, "llm"), ("end", "end_turn", 7)]  # type: ignore[attr-defined]
    del builtins._llm_seen  # type: ignore[attr-defined]


# --- generations -----------------------------------------------------------------------------


def test_reload_disposes_in_reverse_order_and_loads_fresh_code(setup: Setup) -> None:
    order: list[str] = []
    sys.modules["tether_test_order"] = types.SimpleNamespace(order=order)  # type: ignore[assignment]
    try:
        for name in ("first", "second"):
            setup.write(name, tool_mod(name.title(), extra=f"""import tether_test_order
            return lambda: tether_test_order.order.append({name!r})"""))
        assert setup.engine.load() == 1
        setup.write("second", tool_mod("SecondV2"))
        assert setup.engine.reload() == 2
        assert order == ["second", "first"]
        assert sorted(setup.registry.names()) == ["First", "Read", "SecondV2"]
        assert all(o.generation == 2 for o in setup.engine.owners)
    finally:
        del sys.modules["tether_test_order"]


def test_a_load_finishing_after_a_newer_generation_started_is_disposed(setup: Setup) -> None:
    gate = types.SimpleNamespace(entered=threading.Event(), release=threading.Event(), calls=0, disposed=[])
    sys.modules["tether_test_gate"] = gate  # type: ignore[assignment]
    try:
        setup.write("slow", """
            import tether_test_gate as gate

            class T:
                def __init__(self, name):
                    self.name = name
                description = ""
                parameters = {"type": "object", "properties": {}}
                def run(self, args, ctx):
                    return ""

            def activate(api):
                gate.calls += 1
                api.tools.register(T("SlowTool"))
                if gate.calls == 1:  # only the first generation stalls
                    gate.entered.set()
                    assert gate.release.wait(10)
                    api.tools.register(T("LateTool"))  # refused: a newer generation took over
                generation = api.generation
                return lambda: gate.disposed.append(generation)
        """)
        results: list[int] = []
        first = threading.Thread(target=lambda: results.append(setup.engine.reload()))
        first.start()
        assert gate.entered.wait(10)
        assert setup.engine.reload() == 2  # runs while generation 1 is still inside activate
        gate.release.set()
        first.join(10)
        assert results == [1] and setup.engine.generation == 2
        assert sorted(setup.registry.names()) == ["Read", "SlowTool"]
        assert [o.generation for o in setup.engine.owners] == [2]
        assert gate.disposed == [1]  # the stale generation's own disposer ran
        assert setup.diagnostics == []
    finally:
        del sys.modules["tether_test_gate"]


def test_concurrent_reloads_from_many_threads_leave_one_generation(setup: Setup) -> None:
    for n in range(4):
        setup.write(f"mod{n}", tool_mod(f"Tool{n}", extra="import time; time.sleep(0.01)"))
    threads = [threading.Thread(target=setup.engine.reload) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(setup.registry.names()) == ["Read", "Tool0", "Tool1", "Tool2", "Tool3"]
    assert {o.generation for o in setup.engine.owners} == {setup.engine.generation}
    assert len(setup.engine.owners) == 4 and setup.diagnostics == []


def test_reload_from_asyncio_tasks_while_events_run(setup: Setup) -> None:
    setup.write("ev", tool_mod("EvTool", extra="""async def slow(e):
                import asyncio
                await asyncio.sleep(0.05)
                return {"continue": "gen %d" % api.generation}
            api.events.on("turn_end", slow)"""))
    setup.engine.load()

    async def main() -> tuple[Any, int]:
        outcome = types.SimpleNamespace(stop_reason="end_turn", last_text="")
        pending = asyncio.ensure_future(setup.session.turn_end(outcome))  # type: ignore[arg-type]
        await asyncio.sleep(0.01)
        generation = await asyncio.to_thread(setup.session.reload)
        return await pending, generation

    follow, generation = asyncio.run(main())
    assert generation == 2 and follow == "gen 1"  # the running handler finished on its old owner
    assert [o.generation for o in setup.engine.owners] == [2] and "EvTool" in setup.registry.names()


# --- the simple hook events, called the way a frontend calls them ----------------------------


def runner_for(tmp_path: Path, hooks: dict[str, Any], ask_model: Any = None) -> HookRunner:
    config = merge_hooks(hooks, [])
    return HookRunner(config, cwd=tmp_path, agent_id="agent-x", session_id="agent-x", ask_model=ask_model)


def test_user_prompt_submit_blocks_or_adds_context(tmp_path: Path) -> None:
    hooks = {"UserPromptSubmit": [{"hooks": [{"type": "command", "command":
             "cat > ups.json; grep -q secret ups.json && { echo 'no secrets' >&2; exit 2; }; echo 'ctx line'"}]}]}
    runner = runner_for(tmp_path, hooks)
    ok = asyncio.run(TurnHooks(runner).prompt_submit("hello"))
    assert ok.blocked is None and [c.text for c in ok.context] == [
        "<system-reminder>\nUserPromptSubmit hook says:\nctx line\n</system-reminder>"]
    import json

    payload = json.loads((tmp_path / "ups.json").read_text())
    assert payload == {"event_type": "UserPromptSubmit", "working_directory": str(tmp_path),
                       "session_id": "agent-x", "prompt": "hello", "is_command": False,
                       "hook_event_name": "UserPromptSubmit", "cwd": str(tmp_path)}  # Claude Code's names
    blocked = asyncio.run(runner.user_prompt_submit("my secret", is_command=True))
    assert blocked[0].decision == "block" and blocked[0].feedback.endswith("no secrets")


def test_stop_session_compact_and_subagent_events(tmp_path: Path) -> None:
    hooks = {
        "Stop": [{"hooks": [{"type": "command", "command": "cat > stop.json; exit 2"}]}],
        "SessionStart": [{"hooks": [{"type": "command", "command": "cat > start.json; echo welcome"}]}],
        "SessionEnd": [{"hooks": [{"type": "command", "command": "cat > end.json"}]}],
        "PreCompact": [{"hooks": [{"type": "command", "command": "cat > compact.json"}]}],
        "SubagentStop": [{"hooks": [{"type": "command", "command": "cat > sub.json"}]}],
    }
    runner = runner_for(tmp_path, hooks)
    import json

    stop = asyncio.run(runner.stop("end_turn", message_count=3, assistant_message="done"))
    assert [r.decision for r in stop] == ["block"]
    assert json.loads((tmp_path / "stop.json").read_text())["message_count"] == 3
    start = asyncio.run(TurnHooks(runner).session_start(is_new=True, agent_name="bob"))
    assert "welcome" in start.context[0].text and start.blocked is None
    assert json.loads((tmp_path / "start.json").read_text())["agent_name"] == "bob"
    asyncio.run(runner.session_end(reason="exit"))
    assert json.loads((tmp_path / "end.json").read_text())["reason"] == "exit"
    asyncio.run(runner.pre_compact(trigger="manual", context_length=900, max_context_length=1000))
    assert json.loads((tmp_path / "compact.json").read_text())["max_context_length"] == 1000
    asyncio.run(runner.subagent_stop(subagent_type="general-purpose", subagent_id="task_1", success=False, error="x"))
    assert json.loads((tmp_path / "sub.json").read_text())["error"] == "x"


def test_prompt_hooks_parse_and_judge(tmp_path: Path) -> None:
    events, _ = parse_hooks({"Stop": [{"hooks": [{"type": "prompt", "prompt": "p", "model": "m2"}]}]}, "s")
    hook = events["Stop"][0].hooks[0]
    assert (hook.timeout_s, getattr(hook, "model", None)) == (30.0, "m2")
    from tether.errors import UsageError

    with pytest.raises(UsageError, match="prompt"):
        parse_hooks({"Stop": [{"hooks": [{"type": "prompt"}]}]}, "s")
    asked: list[tuple[str, Any]] = []

    async def model(text: str, name: str | None, timeout: float) -> str:
        asked.append((text, name))
        if "slow" in text:
            await asyncio.sleep(5)
        return '{"ok": false, "reason": "stop now"}' if "bad" in text else '{"ok": true}'

    hooks = {"UserPromptSubmit": [{"hooks": [{"type": "prompt", "prompt": "check: $ARGUMENTS", "timeout": 0.2}]}]}
    turn_hooks = TurnHooks(runner_for(tmp_path, hooks, model))
    assert asyncio.run(turn_hooks.prompt_submit("fine")).blocked is None
    assert '"prompt":"fine"' in asked[0][0] and asked[0][0].startswith("check: {")
    assert asyncio.run(turn_hooks.prompt_submit("bad")).blocked == "[prompt hook]: stop now"
    slow = asyncio.run(turn_hooks.prompt_submit("slow"))
    assert slow.blocked is None and "timed out" in slow.notices[0][0]
    no_model = asyncio.run(TurnHooks(runner_for(tmp_path, hooks)).prompt_submit("x"))
    assert "no model" in no_model.notices[0][0]


def test_no_hooks_configured_is_no_outcome() -> None:
    assert asyncio.run(TurnHooks(None).prompt_submit("x")).blocked is None
    assert HookConfig().commands("Stop") == []
