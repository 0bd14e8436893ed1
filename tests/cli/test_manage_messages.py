"""`tether messages search | transcript` over transcripts a real turn wrote (fake provider)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.cli.manage_support import tether, tether_json
from tests.e2e.support import run_tether, tether_env
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"


def turn(workdir: Path, prompt: str, reply: str, *extra: str) -> dict:
    with FakeProvider([{"text": reply}]) as fake:
        run = run_tether(["-p", prompt, "--model", MODEL, "--output-format", "json", *extra],
                         env=tether_env(fake.url, MODEL), cwd=workdir)
    assert run.code == 0, run.stderr
    return json.loads(run.stdout)


def test_search_finds_every_word_newest_first(workdir: Path) -> None:
    first = turn(workdir, "Where do zebras live?", "Zebras live in Africa.")
    second = turn(workdir, "And the striped ZEBRA?", "Also Africa.", "--new")
    hits = tether_json("messages", "search", "--query", "zebra", cwd=workdir)
    assert [h["role"] for h in hits] == ["user", "assistant", "user"]
    assert hits[0]["conversation_id"] == second["conversation_id"]
    assert hits[0]["text"] == "And the striped ZEBRA?" and hits[0]["agent_id"] == first["agent_id"]
    both = tether_json("messages", "search", "--query", "zebras africa", cwd=workdir)
    assert [h["text"] for h in both] == ["Zebras live in Africa."]
    scoped = tether_json("messages", "search", "--query", "zebra", "--conversation",
                         first["conversation_id"], "--limit", "1", cwd=workdir)
    assert [h["text"] for h in scoped] == ["Zebras live in Africa."]
    assert tether_json("messages", "search", "--query", "giraffe", cwd=workdir) == []


def test_transcript_reads_the_conversation(workdir: Path) -> None:
    done = turn(workdir, "hello there", "general kenobi")
    out = tether_json("messages", "transcript", "--conversation", done["conversation_id"], cwd=workdir)
    assert out["conversation_id"] == done["conversation_id"] and out["agent_id"] == done["agent_id"]
    assert out["transcript"] == "user: hello there\n\nassistant: general kenobi"


def test_bad_requests_exit_1_naming_the_problem(workdir: Path) -> None:
    env = dict(os.environ)
    vector = tether("messages", "search", "--query", "x", "--mode", "vector", cwd=workdir, env=env)
    assert vector.code == 1 and "hosted backend" in vector.stderr
    mode = tether("messages", "search", "--query", "x", "--mode", "magic", cwd=workdir)
    assert mode.code == 1 and "--mode must be one of fts, vector, hybrid" in mode.stderr
    empty = tether("messages", "search", "--query", "  ", cwd=workdir)
    assert empty.code == 1 and "at least one word" in empty.stderr
    unknown = tether("messages", "transcript", "--conversation", "local-conv-99", cwd=workdir)
    assert unknown.code == 1 and "No conversation 'local-conv-99'" in unknown.stderr
