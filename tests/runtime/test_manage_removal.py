"""Deleting an agent never loses a committed memory change (issue 34 item 3): its memory repo is
bundled, with a copy of its record, before anything goes, and the bundle restores every commit."""

from __future__ import annotations

import subprocess
from pathlib import Path

import orjson

from tether.backends.local.store import LocalStore
from tether.memory.memfs import MemFS
from tether.runtime.cron.store import CronStore
from tether.runtime.manage.removal import delete_agent


def test_deleting_an_agent_keeps_its_committed_memory_in_a_bundle(tmp_path: Path) -> None:
    home = tmp_path / "home"
    store = LocalStore(home)
    agent = store.create_agent(model="anthropic/claude-test", system="s", name="keeper")
    memory = MemFS.open(home, agent.id)
    memory.write_working("system/human.md", "prefers tabs\n")
    with memory.writing():
        committed = memory.commit(["system/human.md"], "remember the user's taste")
    assert committed is not None

    answer = delete_agent(store, agent.id, CronStore(home))

    assert answer["deleted"] is True
    assert not memory.root.exists()  # the repo itself is gone with the agent
    bundle = Path(answer["memory_backup"])
    assert bundle.is_file()
    record = orjson.loads(bundle.with_name(bundle.name.replace(".bundle", ".agent.json")).read_bytes())
    assert record["id"] == agent.id
    restored = tmp_path / "restored"
    subprocess.run(["git", "clone", "-q", str(bundle), str(restored)], check=True)
    head = subprocess.run(["git", "-C", str(restored), "rev-parse", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert head == committed
    assert (restored / "system" / "human.md").read_text() == "prefers tabs\n"


def test_an_agent_without_a_memory_repo_is_deleted_without_a_backup(tmp_path: Path) -> None:
    home = tmp_path / "home"
    store = LocalStore(home)
    agent = store.create_agent(model="anthropic/claude-test", system="s")
    answer = delete_agent(store, agent.id, CronStore(home))
    assert answer["deleted"] is True and answer["memory_backup"] is None
