"""The channel files have several writers — the gateway (pairing codes), the App Server
(channel requests) and the CLI — so every read-modify-write holds `channels/.lock`: processes
adding routes and pairing codes at the same time lose none of them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tether.runtime.channel_files import PairingStore, RouteTable

WRITER = """
import sys
from pathlib import Path
from tether.runtime.channel_files import PairingStore, Route, RouteTable
home, who = Path(sys.argv[1]), sys.argv[2]
routes, pairing = RouteTable(home), PairingStore(home)
for i in range(40):
    routes.add(Route("webhook", "default", f"{who}-{i}", "agent-x"))
    pairing.code_for("webhook", "default", f"chat-{who}-{i}", f"{who}-{i}", None)
"""


def test_concurrent_writers_lose_no_route_and_no_pairing_code(tether_home: Path) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(tether_home), who])
        for who in ("a", "b", "c")
    ]
    for proc in procs:
        assert proc.wait(120) == 0
    chats = {r.chat_id for r in RouteTable(tether_home).load()}
    assert chats == {f"{who}-{i}" for who in "abc" for i in range(40)}
    senders = {p.sender_id for p in PairingStore(tether_home).pending()}
    assert senders == chats
