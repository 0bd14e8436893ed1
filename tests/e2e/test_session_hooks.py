"""End to end: SessionStart and SessionEnd hooks from settings run in headless `tether -p` and in
the SDK's bidirectional stream-json session too, not only in the TUI (issue 33): the real script,
the fake provider, hook commands that write files."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.e2e.support import run_tether, tether_env
from tests.e2e.test_bidirectional import Client
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"
EVENTS = ("SessionStart", "UserPromptSubmit", "Stop", "SessionEnd")


def hooks_writing_files(home: Path, folder: Path) -> None:
    """Each event's hook appends its name to `order` and keeps its stdin in <event>.json;
    SessionStart also prints a line (context for the model)."""
    home.mkdir(parents=True, exist_ok=True)
    script = folder / "hook.py"
    script.write_text(
        "import json, sys\n"
        "event = json.load(sys.stdin)\n"
        f"folder = {str(folder)!r}\n"
        "name = event['hook_event_name']\n"
        "open(f'{folder}/order', 'a').write(name + '\\n')\n"
        "json.dump(event, open(f'{folder}/{name}.json', 'w'))\n"
        "if name == 'SessionStart':\n"
        "    print('the codeword is kiwi')\n"
    )
    command = f"{sys.executable} {script}"
    hooks = {event: [{"hooks": [{"type": "command", "command": command}]}] for event in EVENTS}
    (home / "settings.json").write_text(json.dumps({"hooks": hooks}))


def written(folder: Path, event: str) -> dict[str, Any]:
    return json.loads((folder / f"{event}.json").read_text())


def first_user_text(body: dict[str, Any]) -> str:
    return json.dumps(body["messages"][0])


def test_headless_runs_session_start_and_end(workdir: Path, tether_home: Path, tmp_path: Path) -> None:
    out = tmp_path / "hooks"
    out.mkdir()
    hooks_writing_files(tether_home, out)
    with FakeProvider([{"text": "first"}, {"text": "second"}]) as fake:
        env = tether_env(fake.url, MODEL)
        run = run_tether(["-p", "go", "--model", MODEL, "--output-format", "stream-json"], env=env, cwd=workdir)
        assert run.code == 0, run.stderr
        order = (out / "order").read_text().split()
        assert order == ["SessionStart", "UserPromptSubmit", "Stop", "SessionEnd"]
        start = written(out, "SessionStart")
        assert start["is_new_session"] is True and start["agent_name"]
        assert start["working_directory"] == str(workdir) and written(out, "SessionEnd")["event_type"] == "SessionEnd"
        # SessionStart's stdout goes to the model with the prompt; the user's prompt stays its own
        assert "the codeword is kiwi" in first_user_text(fake.requests[0]["body"])
        assert written(out, "UserPromptSubmit")["prompt"] == "go"

        (out / "order").unlink()
        again = run_tether(["-p", "more", "--continue", "--model", MODEL, "--output-format", "stream-json"],
                           env=env, cwd=workdir)
        assert again.code == 0, again.stderr
        assert (out / "order").read_text().split() == order
        assert written(out, "SessionStart")["is_new_session"] is False  # the conversation goes on


def test_stream_json_session_runs_session_start_and_end(workdir: Path, tether_home: Path, tmp_path: Path) -> None:
    out = tmp_path / "hooks"
    out.mkdir()
    hooks_writing_files(tether_home, out)
    with FakeProvider([{"text": "one"}, {"text": "two"}]) as fake:
        client = Client(fake.url, workdir)
        client.user("hi")
        assert client.result()["subtype"] == "success"
        client.user("again")
        assert client.result()["subtype"] == "success"
        assert not (out / "SessionEnd.json").exists()  # the session is still open
        assert client.close() == 0
        bodies = [r["body"] for r in fake.requests]
    order = (out / "order").read_text().split()
    assert order == ["SessionStart", "UserPromptSubmit", "Stop", "UserPromptSubmit", "Stop", "SessionEnd"]
    assert written(out, "SessionStart")["is_new_session"] is True
    assert "the codeword is kiwi" in first_user_text(bodies[0])
    assert json.dumps(bodies[1]).count("the codeword is kiwi") == 1  # sent once, with the first prompt
