"""End to end: a conversation pushed past a small context window compacts (reference §4.6, §16)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.support import run_tether, tether_env, transcript_lines
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"
SMALL = {"TETHER_CONTEXT_WINDOW": "2048"}
LEAN = ["--system-custom", "You are terse.", "--tools", "", "--reflection-trigger", "off"]




def turn(workdir: Path, fake: FakeProvider, prompt: str, conversation: str | None, *extra: str,
         env: dict | None = None):
    args = ["-p", prompt, "--model", MODEL, "--output-format", "stream-json", *extra]
    if conversation:
        args += ["--conversation", conversation]
    run = run_tether(args, env=tether_env(fake.url, MODEL, env), cwd=workdir)
    assert run.code == 0, run.stderr
    return run, run.events[-1]["conversation_id"]


def grow(workdir: Path, env: dict, extra: list[str]) -> str:
    """Two turns with long prompts: about 1,250 tokens of a 2,048-token window (threshold 1,639)."""
    conversation = None
    for n in range(2):
        with FakeProvider([{"text": f"noted {n}"}]) as fake:
            _, conversation = turn(workdir, fake, f"part {n}: " + "lorem ipsum " * 150, conversation,
                                   *extra, env=env)
    assert conversation
    return conversation


def compactions(home: Path) -> list[dict]:
    return [e for e in transcript_lines(home) if e.get("type") == "compaction"]


def test_a_conversation_past_the_window_compacts_with_a_summary_call(workdir, tether_home) -> None:
    conversation = grow(workdir, SMALL, LEAN)
    with FakeProvider([{"text": "SUMMARY: the user sent two long parts."}, {"text": "third"}]) as fake:
        run, _ = turn(workdir, fake, "part 2: " + "dolor sit " * 300, conversation, *LEAN, env=SMALL)
        summary_request, next_request = (r["body"] for r in fake.requests)
        assert fake.violations == []
    assert "You are summarising" in json.dumps(summary_request["system"])
    assert not summary_request.get("tools")  # a separate, tool-less call
    assert "lorem ipsum" in json.dumps(summary_request["messages"])
    sent = json.dumps(next_request["messages"])
    assert "system_alert" in sent and "SUMMARY: the user sent two long parts." in sent
    assert "part 0" not in sent  # the evicted history is gone from the request
    events = [e.get("message_type") for e in run.events if e.get("type") == "message"]
    assert "summary_message" in events
    notice = next(e for e in run.events if e.get("message_type") == "event_message"
                  and e.get("event_type") == "compaction")
    assert notice["event_data"]["trigger"] == "context_window_limit"
    assert run.events[-1]["result"] == "third"
    (entry,) = compactions(tether_home)
    assert entry["summary"].startswith("SUMMARY") and entry["details"]["stats"]["context_window"] == 2048


def test_a_failing_summary_call_leaves_history_unchanged(workdir, tether_home) -> None:
    conversation = grow(workdir, SMALL, LEAN)
    before = [e for e in transcript_lines(tether_home) if e.get("type") == "message"]
    fault = {"fault": {"status": 400, "body": {"type": "error", "error": {
        "type": "invalid_request_error", "message": "summaries are broken today"}}}}
    with FakeProvider([fault, {"text": "still here"}]) as fake:
        run, _ = turn(workdir, fake, "part 2: " + "dolor sit " * 300, conversation, *LEAN, env=SMALL)
        assert fake.violations == []
        last_request = fake.requests[-1]["body"]
    assert run.events[-1]["result"] == "still here"
    assert compactions(tether_home) == []
    after = [e for e in transcript_lines(tether_home) if e.get("type") == "message"]
    assert after[: len(before)] == before and len(after) == len(before) + 2
    assert "part 0" in json.dumps(last_request["messages"])  # nothing was dropped


def test_provider_overflow_compacts_and_retries(workdir, tether_home) -> None:
    conversation = grow(workdir, {}, LEAN)
    overflow = {"fault": {"status": 400, "body": {"type": "error", "error": {
        "type": "invalid_request_error", "message": "prompt is too long: 250000 tokens > 200000 maximum"}}}}
    with FakeProvider([overflow, {"text": "SUMMARY: short."}, {"text": "after overflow"}]) as fake:
        run, _ = turn(workdir, fake, "part 2", conversation, *LEAN)
        assert len(fake.requests) == 3 and fake.violations == []
    assert run.events[-1]["result"] == "after overflow"
    (entry,) = compactions(tether_home)
    assert entry["details"]["stats"]["trigger"] == "context_window_overflow"


def test_a_tool_call_and_its_result_survive_compaction_together(workdir, tether_home) -> None:
    conversation = grow(workdir, SMALL, LEAN)
    big = {"name": "Bash", "arguments": {"command": "python3 -c \"print('x' * 3000)\"",
                                          "description": "print a lot"}}
    script = [{"tool_calls": [big]}, {"text": "SUMMARY: earlier parts."}, {"text": "done"}]
    with FakeProvider(script) as fake:
        run, _ = turn(workdir, fake, "run it", conversation, "--system-custom", "You are terse.",
                      "--tools", "Bash", "--yolo", "--reflection-trigger", "off", env=SMALL)
        assert fake.violations == []  # every tool result answered a call in every request
        final = json.dumps(fake.requests[-1]["body"]["messages"])
    assert run.events[-1]["result"] == "done"
    assert len(compactions(tether_home)) == 1
    assert "tool_use" in final and "tool_result" in final and "system_alert" in final


def test_tether_compact_subcommand(workdir, tether_home) -> None:
    conversation = grow(workdir, {}, LEAN)
    with FakeProvider([{"text": "SUMMARY: manual."}]) as fake:
        run = run_tether(["compact", "--conversation", conversation, "--model", MODEL, "--mode", "all"],
                         env=tether_env(fake.url, MODEL), cwd=workdir)
    assert run.code == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["stats"]["trigger"] == "manual" and out["stats"]["mode"] == "all"
    assert compactions(tether_home)[0]["firstKeptEntryId"] is None


def test_pre_compact_hooks_and_mod_events_see_the_compaction(workdir, tether_home) -> None:
    conversation = grow(workdir, SMALL, LEAN)
    seen = workdir.parent / "seen"
    seen.mkdir()
    settings = {"hooks": {"PreCompact": [{"hooks": [
        {"type": "command", "command": f"cat > {seen}/pre-compact.json"}]}]}}
    (tether_home / "settings.json").write_text(json.dumps(settings))
    (tether_home / "mods").mkdir()
    (tether_home / "mods" / "watch.py").write_text(
        "import json\n"
        "def activate(api):\n"
        f"    out = {str(seen)!r}\n"
        "    def log(name):\n"
        "        def handler(event, ctx=None):\n"
        "            with open(out + '/' + name + '.json', 'w') as fh:\n"
        "                json.dump(event, fh)\n"
        "        return handler\n"
        "    api.events.on('compact_start', log('compact_start'))\n"
        "    api.events.on('compact_end', log('compact_end'))\n"
    )
    with FakeProvider([{"text": "SUMMARY: watched."}, {"text": "after"}]) as fake:
        run, _ = turn(workdir, fake, "part 2: " + "dolor sit " * 300, conversation, *LEAN, env=SMALL)
    assert run.events[-1]["result"] == "after", run.stderr
    pre = json.loads((seen / "pre-compact.json").read_text())
    assert pre["event_type"] == "PreCompact" and pre["trigger"] == "context_window_limit"
    assert pre["max_context_length"] == 2048 and pre["context_length"] > 1639
    start = json.loads((seen / "compact_start.json").read_text())
    end = json.loads((seen / "compact_end.json").read_text())
    assert start["trigger"] == end["trigger"] == "context_window_limit"
    assert end["counts"]["messages_count_after"] < end["counts"]["messages_count_before"]
