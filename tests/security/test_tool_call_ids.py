"""A model that reuses tool-call ids (local servers number `call_0` afresh every step) gets every
call run and answered: tether keys its records on ids it owns."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.support import run_tether, tether_env
from tether.testing.fake_provider import FakeProvider

MODEL = "openai-chat/gpt-test"


def touch(name: str) -> dict:
    return {"name": "Bash", "id": "call_0", "arguments": {"command": f"touch {name}", "description": "t"}}


def test_reused_ids_across_steps_and_within_a_batch_all_run(tmp_path: Path) -> None:
    workdir = tmp_path / "project"
    workdir.mkdir()
    script = [
        {"tool_calls": [touch("a")]},
        {"tool_calls": [touch("b")]},
        {"tool_calls": [touch("c"), touch("d")]},
        {"text": "done"},
    ]
    with FakeProvider(script) as fake:
        run = run_tether(["-p", "go", "--model", MODEL, "--yolo", "--toolset", "default",
                          "--output-format", "stream-json"], env=tether_env(fake.url, MODEL), cwd=workdir)
        assert fake.violations == []  # every history sent had one answer per call, ids unique
    assert run.code == 0, run.stderr
    assert sorted(p.name for p in workdir.iterdir()) == ["a", "b", "c", "d"]
    returns = run.of_type("message", "tool_return_message")
    assert [r["status"] for r in returns] == ["success"] * 4
    assert len({r["tool_call_id"] for r in returns}) == 4
    resumed = run_tether(["-p", "again", "--model", MODEL, "--conversation",
                          run.events[0]["conversation_id"]], env=tether_env("http://127.0.0.1:9", MODEL), cwd=workdir)
    assert "may have completed" not in resumed.stdout + resumed.stderr


def test_an_id_known_only_to_the_checkpoints_is_not_reused() -> None:
    # after a compaction the loaded history no longer shows old calls; the effect checkpoints do
    from tether.backends.local.backend import _CallIds

    ids = _CallIds([], taken=lambda i: i in {"call_0", "call_0_t2"})
    assert ids.own("call_0") == "call_0_t3"
    assert ids.own("call_1") == "call_1"
    assert ids.own("call_1") == "call_1_t2"
    assert ids.own("") == "call_t2"
