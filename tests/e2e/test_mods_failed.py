"""`tether mods list` tells the truth about mods that do not load: a syntax error shows before
any session tried the mod (compiled, not run); a failure in activate or in an event handler shows
after the session that met it, with its error, recorded in $TETHER_HOME/state/mod-loads.json;
a mod edited since, or loaded cleanly since, is no longer shown as failed."""

from __future__ import annotations

import json
import os
import textwrap
import time
from pathlib import Path

from tests.e2e.support import run_tether, tether_env
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"
GOOD = "def activate(api):\n    return None\n"


def _mod(folder: Path, name: str, source: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    return path


def _rows(workdir: Path) -> dict[str, dict]:
    run = run_tether(["mods", "list", "--json"], env=tether_env("http://127.0.0.1:9", MODEL), cwd=workdir)
    assert run.code == 0, run.stderr
    return {r["name"]: r for r in json.loads(run.stdout)}


def _session(workdir: Path) -> str:
    with FakeProvider([{"text": "answered"}]) as fake:
        run = run_tether(["-p", "go", "--model", MODEL], env=tether_env(fake.url, MODEL), cwd=workdir)
    assert run.code == 0, run.stderr
    return run.stderr


def _home() -> Path:
    return Path(os.environ["TETHER_HOME"])


def test_a_syntax_error_shows_as_failed_before_any_session(workdir: Path) -> None:
    _mod(_home() / "mods", "syntax", "def activate(api)\n    pass\n")
    _mod(_home() / "mods", "good", GOOD)
    rows = _rows(workdir)
    assert rows["syntax"]["status"] == "failed"
    assert rows["syntax"]["error"].startswith("import: SyntaxError")
    assert "line 1" in rows["syntax"]["error"]
    assert rows["good"]["status"] == "enabled" and "error" not in rows["good"]
    text = run_tether(["mods", "list"], env=tether_env("http://127.0.0.1:9", MODEL), cwd=workdir).stdout
    assert "syntax\tglobal\tfailed (import: SyntaxError" in text


def test_activate_and_event_failures_show_after_the_session_that_met_them(workdir: Path) -> None:
    broken = _mod(_home() / "mods", "broken", """
        def activate(api):
            raise RuntimeError("boom in activate")
    """)
    _mod(_home() / "mods", "flaky", """
        def activate(api):
            api.events.on("turn_start", lambda event: 1 / 0)
    """)
    _mod(_home() / "mods", "good", GOOD)
    before = _rows(workdir)
    assert {n: r["status"] for n, r in before.items()} == dict.fromkeys(("broken", "flaky", "good"), "enabled")
    stderr = _session(workdir)
    assert "mod broken failed in activate" in stderr
    rows = _rows(workdir)
    assert rows["broken"]["status"] == "failed"
    assert rows["broken"]["error"] == "activate: RuntimeError: boom in activate"
    assert rows["flaky"]["status"] == "failed"
    assert rows["flaky"]["error"].startswith("event: RuntimeError: turn_start handler: ZeroDivisionError")
    assert rows["good"]["status"] == "enabled"
    record = json.loads((_home() / "state" / "mod-loads.json").read_text())
    assert {e["name"] for e in record.values()} == {"broken", "flaky"}

    time.sleep(0.05)  # the fix is newer than the record: the old failure no longer applies
    broken.write_text(GOOD)
    assert _rows(workdir)["broken"]["status"] == "enabled"
    _session(workdir)  # loads cleanly now: its entry is gone from the record on disk
    record = json.loads((_home() / "state" / "mod-loads.json").read_text())
    assert "broken" not in {e["name"] for e in record.values()}


def test_a_disabled_failing_mod_shows_as_disabled(workdir: Path) -> None:
    _mod(_home() / "mods", "syntax", "def activate(api)\n    pass\n")
    env = tether_env("http://127.0.0.1:9", MODEL)
    assert run_tether(["mods", "disable", "syntax"], env=env, cwd=workdir).code == 0
    assert _rows(workdir)["syntax"]["status"] == "disabled"
