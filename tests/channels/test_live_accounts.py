"""The gateway's live accounts follow accounts.json: an enabled account's adapter starts, a
disabled or removed one's stops, a plugin-config change restarts it, an access change (allowed
users) keeps it running with the new settings, and a half-written file keeps what runs."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tether.channels import plugins
from tether.channels.config import Account, AccountStore, GatewayStatus
from tether.channels.live_accounts import LiveAccounts
from tether.channels.plugins import InboundMessage

PLUGIN = Path(__file__).parent / "custom_filedrop"


async def _ignore(msg: InboundMessage) -> None:
    pass


def test_accounts_are_started_stopped_and_restarted_as_the_file_changes(
    tether_home: Path, tmp_path: Path
) -> None:
    plugins.install(tether_home, PLUGIN)
    store = AccountStore(tether_home)
    store.upsert(Account("filedrop", "a", config={"dir": str(tmp_path / "a")}))
    lines: list[str] = []

    async def scenario() -> None:
        live = LiveAccounts(tether_home, _ignore, lines.append)
        live.load()
        await live.start_all()
        status = GatewayStatus(tether_home)
        assert status.running() == {("filedrop", "a")}
        first = live.adapters[("filedrop", "a")]
        assert not await live.refresh()  # nothing changed

        store.upsert(Account("filedrop", "b", config={"dir": str(tmp_path / "b")}))
        assert await live.refresh()
        assert set(live.adapters) == {("filedrop", "a"), ("filedrop", "b")}
        assert live.adapters[("filedrop", "a")] is first
        assert status.running() == {("filedrop", "a"), ("filedrop", "b")}

        allowed = store.get("filedrop", "a")
        assert allowed is not None
        allowed.allowed_users = ["ann"]
        store.upsert(allowed)
        assert await live.refresh()
        assert live.adapters[("filedrop", "a")] is first  # not restarted for an access change
        assert live.account_of[("filedrop", "a")].allowed_users == ["ann"]

        allowed.config = {"dir": str(tmp_path / "a2")}
        store.upsert(allowed)
        assert await live.refresh()
        await asyncio.sleep(0.01)  # the stopped adapter's task sees its cancellation
        assert live.adapters[("filedrop", "a")] is not first and not first.is_running()

        off = store.get("filedrop", "b")
        assert off is not None
        off.enabled = False
        store.upsert(off)
        assert await live.refresh()
        assert set(live.adapters) == {("filedrop", "a")}
        assert status.running() == {("filedrop", "a")}

        store.path.write_text("{half written")
        assert await live.refresh()
        assert set(live.adapters) == {("filedrop", "a")}  # what runs keeps running
        assert any("not reloaded" in line for line in lines)

        await live.stop_all()
        assert status.running() == set() and not status.path.exists()

    asyncio.run(scenario())
    assert "channel-gateway: filedrop/b stopped" in lines
