"""Issue 14, App Server scope: where a runtime may run and in which mode, per token.

No runtime's cwd is inside TETHER_HOME (symlinks resolved); a scoped token may not pick a folder
holding TETHER_HOME, a mode beyond `strict`/`standard` (unless its `modes` claim adds
`acceptEdits`), nor a project whose settings ask for more; refusals create nothing. Unknown and
unsupported frame fields are errors, never silently ignored.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from websockets.exceptions import InvalidStatus

from tests.requirements import need_bwrap
from tests.server.support import MODEL, Client, InProcess, point_at
from tether.server import auth
from tether.server.runtime_start import sandbox_available
from tether.testing.fake_provider import FakeProvider

SECRET = b"k" * 32
POLICY = auth.AuthPolicy("signed-bearer-token", secret=SECRET)


def token(**claims: Any) -> dict[str, str]:
    body = {"exp": time.time() + 300, **claims}
    return {"Authorization": f"Bearer {jwt.encode(body, SECRET, algorithm='HS256')}"}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    d = tmp_path / "project"
    d.mkdir()
    return d


async def start(srv: InProcess, headers: dict[str, str], **fields: Any) -> dict[str, Any]:
    async with srv.connect(additional_headers=headers) as ws:
        c = Client(ws)
        fields.setdefault("cwd", str(srv.options.cwd))
        await c.send({"type": "runtime_start", "request_id": "r", **fields})
        return await c.of_type("runtime_start_response")


def made(home: Path) -> int:
    """Agents and conversations on disk: a refusal must not change it."""
    return len(list(home.glob("agents/*.json"))) + len(list(home.glob("conversations/*")))


def state_dirs(home: Path) -> dict[str, Path]:
    (home / "providers").mkdir(parents=True, exist_ok=True)
    return {"home": home, "providers": home / "providers"}


def test_no_runtime_runs_inside_tether_home(
    project: Path, tether_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    link = tmp_path / "innocent"
    link.symlink_to(tether_home / "providers", target_is_directory=True)
    with FakeProvider([{"text": "hi"}]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with InProcess(project, policy=POLICY) as srv:
                dirs = state_dirs(tether_home)
                before = made(tether_home)
                for headers in (token(), token(agents=["a"], conversations=["c"])):
                    for cwd in (dirs["home"], dirs["providers"], link):
                        answer = await start(
                            srv, headers, cwd=str(cwd),
                            create_agent={"body": {"model": MODEL}}, create_conversation={},
                        )
                        assert answer["success"] is False, (cwd, answer)
                        error = answer["error"]
                        assert "token" in error or "inside TETHER_HOME" in error, error
                # the admin token's refusals are about the folder, not the grant
                answer = await start(
                    srv, token(), cwd=str(link), create_agent={"body": {"model": MODEL}}
                )
                assert "inside TETHER_HOME" in answer["error"] and str(link) in answer["error"]
                assert made(tether_home) == before  # nothing was created

        asyncio.run(scenario())


def test_a_scoped_token_may_not_work_in_a_folder_holding_tether_home(
    tmp_path: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = tether_home.parent  # holds tether-home
    with FakeProvider([{"text": "hi"}] * 3) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with InProcess(parent, policy=POLICY) as srv:
                admin = await start(srv, token(), create_agent={"body": {"model": MODEL}},
                                    create_conversation={})
                assert admin["success"], admin  # an unscoped client may (the guard protects)
                agent, conv = admin["runtime"]["agent_id"], admin["runtime"]["conversation_id"]
                scoped = token(agents=[agent], conversations=[conv])
                answer = await start(srv, scoped, agent_id=agent, conversation_id=conv)
                assert answer["success"] is False
                assert "contains TETHER_HOME" in answer["error"], answer

        asyncio.run(scenario())


def test_scoped_tokens_get_only_their_modes(
    project: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeProvider([{"text": "hi"}] * 5) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with InProcess(project, policy=POLICY) as srv:
                first = await start(srv, token(), create_agent={"body": {"model": MODEL}},
                                    create_conversation={})
                agent = first["runtime"]["agent_id"]
                conv_a = first["runtime"]["conversation_id"]
                assert srv.server is not None
                conv_b = srv.server.ctx.store.create_conversation(agent).id  # no runtime yet
                scoped = token(agents=[agent], conversations=[conv_b])
                before = made(tether_home)
                for mode in ("unrestricted", "bypassPermissions", "acceptEdits"):
                    answer = await start(srv, scoped, agent_id=agent, conversation_id=conv_b,
                                         mode=mode)
                    assert answer["success"] is False, (mode, answer)
                    assert "may not use permission mode" in answer["error"], answer
                assert made(tether_home) == before
                assert not any(s.conversation_id == conv_b for s in srv.server.runtimes)
                # acceptEdits when the token's modes claim grants it; strict always
                edits = token(agents=[agent], conversations=[conv_b],
                              modes=["standard", "acceptEdits"])
                ok = await start(srv, edits, agent_id=agent, conversation_id=conv_b,
                                 mode="acceptEdits")
                assert ok["success"], ok
                # an admin put conversation A in unrestricted: a scoped client cannot join it
                loose = await start(srv, token(), agent_id=agent, conversation_id=conv_a)
                assert loose["success"]
                async with srv.connect(additional_headers=token()) as ws:
                    c = Client(ws)
                    await c.send({"type": "runtime_start", "request_id": "s",
                                  "agent_id": agent, "conversation_id": conv_a})
                    await c.of_type("runtime_start_response")
                    await c.send({"type": "change_device_state", "request_id": "m",
                                  "runtime": {"agent_id": agent, "conversation_id": conv_a},
                                  "payload": {"mode": "unrestricted"}})
                    assert (await c.of_type("change_device_state_response"))["success"]
                joined = await start(srv, token(agents=[agent], conversations=[conv_a]),
                                     agent_id=agent, conversation_id=conv_a)
                assert joined["success"] is False
                assert "unrestricted" in joined["error"], joined

        asyncio.run(scenario())


def test_a_scoped_client_cannot_loosen_its_runtime_later(
    project: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeProvider([{"text": "hi"}] * 3) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with InProcess(project, policy=POLICY) as srv:
                first = await start(srv, token(), create_agent={"body": {"model": MODEL}},
                                    create_conversation={}, workspace_sandbox=True)
                runtime = first["runtime"]
                scoped = token(agents=[runtime["agent_id"]],
                               conversations=[runtime["conversation_id"]])
                async with srv.connect(additional_headers=scoped) as ws:
                    c = Client(ws)
                    await c.send({"type": "runtime_start", "request_id": "s", **runtime,
                                  "cwd": str(project)})
                    assert (await c.of_type("runtime_start_response"))["success"]
                    for n, payload in enumerate([{"mode": "unrestricted"},
                                                 {"mode": "acceptEdits"},
                                                 {"cwd": str(tether_home)}]):
                        await c.send({"type": "change_device_state", "request_id": f"d{n}",
                                      "runtime": runtime, "payload": payload})
                        error = await c.of_type("error", request_id=f"d{n}")
                        assert "change_device_state" in error["message"], error
                    # the connection still works, and the runtime kept its mode and folder
                    await c.send({"type": "sync", "request_id": "y", "runtime": runtime})
                    status = await c.of_type("update_device_status")
                    device = status["device_status"]
                    assert device["current_permission_mode"] == "default"
                    assert device["current_working_directory"] == str(project.resolve())

        asyncio.run(scenario())


def test_a_scoped_clients_conversations_always_run_sandboxed(
    project: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need_bwrap()
    with FakeProvider([{"text": "hi"}] * 3) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with InProcess(project, policy=POLICY) as srv:
                plain = await start(srv, token(), create_agent={"body": {"model": MODEL}},
                                    create_conversation={})
                assert plain["success"] and plain["workspace_sandbox"] is False
                runtime = plain["runtime"]
                scoped = token(agents=[runtime["agent_id"]],
                               conversations=[runtime["conversation_id"]])
                joined = await start(srv, scoped, **runtime)
                assert joined["success"] is False
                assert "without the workspace sandbox" in joined["error"], joined
                assert srv.server is not None
                other = srv.server.ctx.store.create_conversation(runtime["agent_id"]).id
                mine = await start(srv, token(agents=[runtime["agent_id"]],
                                              conversations=[other]),
                                   agent_id=runtime["agent_id"], conversation_id=other)
                assert mine["success"] and mine["workspace_sandbox"] is True, mine
                assert "TETHER_FS_SANDBOX" not in os.environ  # the switch was lent, not left

        asyncio.run(scenario())


def test_project_settings_cannot_lend_a_scoped_client_a_looser_mode(
    project: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.runtime.policy.trust import TrustStore

    (project / ".tether").mkdir()
    (project / ".tether" / "settings.json").write_text(
        json.dumps({"permissions": {"defaultMode": "bypassPermissions"}})
    )
    TrustStore(tether_home).trust(project)
    with FakeProvider([{"text": "hi"}] * 3) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with InProcess(project, policy=POLICY) as srv:
                store = srv.server.ctx.store  # type: ignore[union-attr]
                agent = store.create_agent(model=MODEL, system="s", name="a").id
                conv = store.create_conversation(agent).id
                scoped = token(agents=[agent], conversations=[conv])
                answer = await start(srv, scoped, agent_id=agent, conversation_id=conv)
                assert answer["success"] is False
                assert "unrestricted" in answer["error"] and "settings" in answer["error"]
                # asking for standard explicitly is fine: the flag beats the settings
                ok = await start(srv, scoped, agent_id=agent, conversation_id=conv,
                                 mode="standard")
                assert ok["success"], ok

        asyncio.run(scenario())


LOOSENING = {
    "allow rules": ({"permissions": {"allow": ["Bash"]}}, "permissions.allow"),
    "hooks": ({"hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": "true"}]}]}},
              "hooks"),
    "unix sockets": ({"sandbox": {"allowUnixSockets": True}}, "sandbox"),
    "network": ({"sandbox": {"network": True}}, "sandbox"),
    "kept credentials": ({"sandbox": {"keepEnv": ["AWS_SECRET_ACCESS_KEY"]}}, "sandbox"),
    "additional directories": ({"permissions": {"additionalDirectories": ["/tmp"]}},
                               "permissions.additionalDirectories"),
}


@pytest.mark.parametrize(("data", "named"), LOOSENING.values(), ids=LOOSENING.keys())
def test_a_scoped_client_gets_no_loosening_from_a_trusted_folder(
    project: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch, data: dict, named: str
) -> None:
    from tether.runtime.policy.trust import TrustStore

    (project / ".tether").mkdir()
    (project / ".tether" / "settings.json").write_text(json.dumps(data))
    with FakeProvider([{"text": "hi"}] * 3) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with InProcess(project, policy=POLICY) as srv:
                assert srv.server is not None
                store = srv.server.ctx.store
                agent = store.create_agent(model=MODEL, system="s", name="a").id
                conv, other = store.create_conversation(agent).id, store.create_conversation(agent).id
                scoped = token(agents=[agent], conversations=[conv, other])
                # untrusted: the loosening is ignored anyway, so the scoped client may start
                untrusted = await start(srv, scoped, agent_id=agent, conversation_id=conv)
                assert untrusted["success"], untrusted
                TrustStore(tether_home).trust(project)
                answer = await start(srv, scoped, agent_id=agent, conversation_id=other)
                assert answer["success"] is False, answer
                assert "loosen permissions" in answer["error"] and named in answer["error"]
                admin = await start(srv, token(), agent_id=agent, conversation_id=other)
                assert admin["success"], admin  # the folder's owner trusted it for themselves

        asyncio.run(scenario())


def test_tightening_project_settings_do_not_stop_a_scoped_client(
    project: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.runtime.policy.trust import TrustStore

    (project / ".tether").mkdir()
    (project / ".tether" / "settings.json").write_text(json.dumps(
        {"permissions": {"deny": ["Bash(rm:*)"], "defaultMode": "strict"}}))
    TrustStore(tether_home).trust(project)
    with FakeProvider([{"text": "hi"}]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with InProcess(project, policy=POLICY) as srv:
                assert srv.server is not None
                store = srv.server.ctx.store
                agent = store.create_agent(model=MODEL, system="s", name="a").id
                conv = store.create_conversation(agent).id
                ok = await start(srv, token(agents=[agent], conversations=[conv]),
                                 agent_id=agent, conversation_id=conv)
                assert ok["success"], ok

        asyncio.run(scenario())


@pytest.mark.parametrize("modes", [["unrestricted"], ["standard", "bypassPermissions"],
                                   "standard", [1], ["yolo"]])
def test_bad_or_unrestricted_modes_claims_are_refused_at_the_upgrade(
    project: Path, modes: Any
) -> None:
    async def scenario() -> None:
        async with InProcess(project, policy=POLICY) as srv:
            with pytest.raises(InvalidStatus) as err:
                async with srv.connect(
                    additional_headers=token(conversations=["c"], modes=modes)
                ):
                    pass
            assert err.value.response.status_code == 401

    asyncio.run(scenario())


BAD_STARTS = [
    ({"workspace_sandbox": {"isolation_root": "/tmp/x"}}, "isolation_root"),
    ({"workspace_sandbox": {"root": "/"}}, "workspace_sandbox.root"),
    ({"workspace_sandbox": "yes"}, "workspace_sandbox"),
    ({"settings": {"permissions": {"allow": ["Bash"]}}}, "'settings' is not a field"),
    ({"permission_mode": "unrestricted"}, "'permission_mode' is not a field"),
    ({"skill_sources": ["/tmp"]}, "skill_sources"),
    ({"external_tools": [{"tools": []}]}, "external_tools"),
    ({"recover_approvals": "yes"}, "recover_approvals"),
    ({"cwd": "relative/dir"}, "absolute"),
    ({"cwd": "/no/such/dir"}, "not a directory"),
    ({"cwd": "/tmp\u0000/x"}, "NUL"),
]


@pytest.mark.parametrize(("extra", "why"), BAD_STARTS)
def test_runtime_start_with_a_bad_field_is_refused_and_creates_nothing(
    project: Path, tether_home: Path, extra: dict[str, Any], why: str
) -> None:
    async def scenario() -> None:
        async with InProcess(project) as srv, srv.connect() as ws:
            c = Client(ws)
            frame = {"type": "runtime_start", "request_id": "r", "cwd": str(project),
                     "create_agent": {"body": {"model": MODEL}}, **extra}
            await c.send(frame)
            answer = await c.wait_for(lambda f: f.get("request_id") == "r")
            assert answer.get("success") is not True, answer
            text = answer.get("message") or answer.get("error")
            assert why in text, answer
            assert made(tether_home) == 0
            await c.send({"type": "app_server_info", "request_id": "after"})
            assert (await c.of_type("app_server_info_response"))["request_id"] == "after"

    asyncio.run(scenario())


def test_capabilities_say_whether_the_sandbox_can_be_enforced(project: Path) -> None:
    async def scenario() -> None:
        async with InProcess(project) as srv, srv.connect() as ws:
            c = Client(ws)
            await c.send({"type": "app_server_info", "request_id": "i"})
            info = await c.of_type("app_server_info_response")
            expected = sandbox_available() is None
            assert info["capabilities"]["runtime_workspace_sandbox"] is expected

    asyncio.run(scenario())


def test_an_existing_runtime_is_not_silently_different_from_what_is_asked(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    with FakeProvider([{"text": "hi"}] * 3) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with InProcess(project) as srv:
                first = await start(srv, {}, create_agent={"body": {"model": MODEL}},
                                    create_conversation={})
                assert first["success"] and first["workspace_sandbox"] is False
                runtime = first["runtime"]
                for extra, why in (({"cwd": str(other)}, "already runs in"),
                                   ({"mode": "strict"}, "already runs in mode"),
                                   ({"workspace_sandbox": True}, "without the workspace sandbox")):
                    if extra.get("workspace_sandbox") and sandbox_available() is not None:
                        continue  # refused earlier, for the machine (tested elsewhere)
                    answer = await start(srv, {}, **runtime, **extra)
                    assert answer["success"] is False and why in answer["error"], answer
                same = await start(srv, {}, **runtime)
                assert same["success"], same

        asyncio.run(scenario())


def test_tether_server_refuses_a_default_cwd_inside_tether_home(
    tether_home: Path, tmp_path: Path
) -> None:
    import subprocess

    from tests.server.support import TETHER, server_env

    (tether_home / "agents").mkdir(parents=True)
    for cwd in (tether_home, tether_home / "agents"):
        proc = subprocess.run(
            [TETHER, "server", "--listen", "ws://127.0.0.1:0", "--cwd", str(cwd)],
            env=server_env("http://127.0.0.1:9", tether_home, tmp_path),
            capture_output=True, text=True, timeout=30,
        )
        assert proc.returncode == 1 and proc.stdout == "", proc
        assert "inside TETHER_HOME" in proc.stderr, proc.stderr


def test_a_long_lived_runtime_drops_project_settings_when_its_folder_changes(
    project: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Trust binds to what runs across turns too: edit a skill of a trusted folder while its
    runtime lives, and the next turn no longer gets the project's allow rule."""
    from tests.server.support import bash
    from tether.runtime.policy.trust import TrustStore

    (project / ".tether" / "skills" / "s").mkdir(parents=True)
    (project / ".tether" / "skills" / "s" / "SKILL.md").write_text("---\nname: s\n---\nok\n")
    (project / ".tether" / "settings.json").write_text(
        json.dumps({"permissions": {"allow": ["Bash(touch:*)"]}}))
    TrustStore(tether_home).trust(project)
    script = [{"tool_calls": [bash("touch first")]}, {"text": "one"},
              {"tool_calls": [bash("touch second")]}, {"text": "two"}]
    with FakeProvider(script) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with InProcess(project) as srv, srv.connect() as ws:
                c = Client(ws)
                runtime = (await c.start(project))["runtime"]
                await c.say(runtime, "one")
                first = await c.wait_for(
                    lambda f: f.get("type") in ("turn_finished", "control_request"))
                assert first["type"] == "turn_finished", first  # the allow rule applied
                assert (project / "first").exists()
                (project / ".tether" / "skills" / "s" / "SKILL.md").write_text("evil\n")
                await c.say(runtime, "two", request_id="in-2")
                asked = await c.wait_for(
                    lambda f: f.get("type") in ("turn_finished", "control_request"))
                assert asked["type"] == "control_request", asked  # no longer allowed by rule
                await c.answer(runtime, asked["request_id"], "deny", message="no")
                await c.of_type("turn_finished")
                assert not (project / "second").exists()
                notes = [f["message"] for f in c.seen if f.get("type") == "error"]
                assert any("changed since it was trusted" in n for n in notes), notes

        asyncio.run(scenario())


def test_a_scoped_client_cannot_join_a_runtime_another_client_started_over_tether_home(
    tether_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = tether_home.parent
    other = tmp_path / "elsewhere"
    other.mkdir()
    with FakeProvider([{"text": "hi"}] * 3) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with InProcess(other, policy=POLICY) as srv:
                admin = await start(srv, token(), cwd=str(parent), workspace_sandbox=True,
                                    create_agent={"body": {"model": MODEL}},
                                    create_conversation={})
                assert admin["success"], admin
                runtime = admin["runtime"]
                scoped = token(agents=[runtime["agent_id"]],
                               conversations=[runtime["conversation_id"]])
                async with srv.connect(additional_headers=scoped) as ws:
                    c = Client(ws)  # no cwd: it would join the runtime where it runs
                    await c.send({"type": "runtime_start", "request_id": "j", **runtime})
                    joined = await c.of_type("runtime_start_response")
                assert joined["success"] is False and "contains TETHER_HOME" in joined["error"]

        asyncio.run(scenario())


def test_no_client_moves_a_runtime_into_tether_home(
    project: Path, tether_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    link = tmp_path / "looks-harmless"
    link.symlink_to(tether_home, target_is_directory=True)
    with FakeProvider([{"text": "hi"}]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with InProcess(project) as srv, srv.connect() as ws:
                c = Client(ws)
                runtime = (await c.start(project))["runtime"]
                (tether_home / "agents").mkdir(exist_ok=True)
                dotdot = tether_home / "agents" / ".."  # resolves back to TETHER_HOME
                for n, target in enumerate((tether_home, link, dotdot)):
                    await c.send({"type": "change_device_state", "request_id": f"c{n}",
                                  "runtime": runtime, "payload": {"cwd": str(target)}})
                    error = await c.of_type("error", request_id=f"c{n}")
                    assert "inside TETHER_HOME" in error["message"], error
                await c.send({"type": "sync", "request_id": "s", "runtime": runtime})
                status = await c.of_type("update_device_status")
                cwd = status["device_status"]["current_working_directory"]
                assert cwd == str(project.resolve())

        asyncio.run(scenario())
