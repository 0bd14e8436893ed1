"""Cross-process behaviour of the store: the turn lock and the id counter, with real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tether.backends.local.store import LocalStore
from tether.errors import ConversationBusy

Holder = Callable[[str, str], "subprocess.Popen[str]"]

_HOLD_LOCK = """
import sys, time
from pathlib import Path
from tether.backends.local.store import LocalStore
store = LocalStore(Path(sys.argv[1]))
with store.turn_lock(sys.argv[2], sys.argv[3]):
    print("locked", flush=True)
    time.sleep(120)
"""

_MAKE_CONVERSATIONS = """
import sys
from pathlib import Path
from tether.backends.local.store import LocalStore
store = LocalStore(Path(sys.argv[1]))
sys.stdin.readline()  # start together
for _ in range(int(sys.argv[3])):
    if sys.argv[2] == "-":
        print(store.next_counter("run"), flush=True)
    else:
        print(store.create_conversation(sys.argv[2]).id, flush=True)
"""


@pytest.fixture
def holder(tether_home: Path) -> Iterator[Holder]:
    procs: list[subprocess.Popen[str]] = []

    def start(agent_id: str, conversation_id: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", _HOLD_LOCK, str(tether_home), agent_id, conversation_id],
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline() == "locked\n"
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_turn_lock_held_by_another_process_is_busy_until_it_dies(
    tether_home: Path, holder: Holder
) -> None:
    store = LocalStore(tether_home)
    agent = store.create_agent(model=None, system="s")
    conv = store.create_conversation(agent.id)
    proc = holder(agent.id, conv.id)

    with pytest.raises(ConversationBusy) as exc, store.turn_lock(agent.id, conv.id):
        pass
    assert exc.value.conversation_id == conv.id

    started = time.monotonic()
    with pytest.raises(ConversationBusy), store.turn_lock(agent.id, conv.id, wait=0.3):
        pass
    assert time.monotonic() - started >= 0.3

    # Another conversation of the same agent is not affected.
    with store.turn_lock(agent.id, "default"):
        pass

    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with store.turn_lock(agent.id, conv.id, wait=2):
        pass


def test_waiting_for_the_turn_lock_gets_it_when_released(tether_home: Path, holder: Holder) -> None:
    store = LocalStore(tether_home)
    proc = holder("agent-x", "local-conv-1")
    killer = subprocess.Popen(
        [sys.executable, "-c", f"import os,time,signal; time.sleep(0.3); os.kill({proc.pid}, 9)"]
    )
    try:
        with store.turn_lock("agent-x", "local-conv-1", wait=10):
            pass
    finally:
        killer.wait()


def test_turn_lock_excludes_a_second_open_in_this_process(tether_home: Path) -> None:
    store = LocalStore(tether_home)
    with (
        store.turn_lock("a", "c"),
        pytest.raises(ConversationBusy),
        LocalStore(tether_home).turn_lock("a", "c"),
    ):
        pass
    with store.turn_lock("a", "c"):  # released on exit
        pass


def test_turn_lock_is_released_when_the_body_raises(tether_home: Path) -> None:
    store = LocalStore(tether_home)
    with pytest.raises(RuntimeError), store.turn_lock("a", "c"):
        raise RuntimeError("turn failed")
    with store.turn_lock("a", "c"):
        pass


def _race(home: Path, agent_id: str, per_process: int) -> list[str]:
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _MAKE_CONVERSATIONS,
                str(home),
                agent_id,
                str(per_process),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    ids: list[str] = []
    for proc in procs:
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        ids += out.split()
    return ids


def test_counter_values_are_unique_across_processes(tether_home: Path) -> None:
    values = _race(tether_home, "-", 100)
    assert sorted(map(int, values)) == list(range(1, 201))
    assert LocalStore(tether_home).next_counter("run") == 201


def test_conversation_ids_are_unique_across_processes(tether_home: Path) -> None:
    store = LocalStore(tether_home)
    agent = store.create_agent(model=None, system="s")
    per_process = 25
    ids = _race(tether_home, agent.id, per_process)
    assert len(ids) == 2 * per_process
    assert sorted(ids) == sorted(f"local-conv-{n}" for n in range(1, 2 * per_process + 1))
    assert store.next_counter("conversation") == 2 * per_process + 1
    assert len(store.list_conversations(agent.id)) == 2 * per_process
