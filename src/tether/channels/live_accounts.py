"""The channel accounts a running gateway serves, kept in step with `accounts.json`: an adapter
for every enabled account, and when the file changes (`tether channels configure`, or an App
Server client's `channel_account_*` / `channel_set_config` request) the accounts re-read — a
new or enabled account's adapter started, a removed or disabled one's stopped, one whose
plugin config changed restarted, and access settings (allowed users, policies) taken as they
are. Which accounts run is written to `gateway-status.json` for the App Server to report."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path

from tether.channels.config import Account, AccountStore, GatewayStatus, signature
from tether.channels.plugins import Adapter, OnMessage, load_plugin
from tether.errors import TetherError

Key = tuple[str, str]  # (channel, account id)
RELOAD_EVERY = 1.0  # seconds between looks at accounts.json


def _restart_needed(old: Account, new: Account) -> bool:
    return old.config != new.config or old.display_name != new.display_name


class LiveAccounts:
    def __init__(self, home: Path, on_message: OnMessage,
                 log: Callable[[str], None] = lambda line: print(line, flush=True)) -> None:
        self.home = home
        self.store = AccountStore(home)
        self.status = GatewayStatus(home)
        self.on_message = on_message
        self.log = log
        self.adapters: dict[Key, Adapter] = {}
        self.account_of: dict[Key, Account] = {}
        self.failed: dict[Key, str] = {}  # accounts whose adapter would not start: why
        self._seen: str | None = None

    def _adapter(self, account: Account) -> Adapter:
        adapter = load_plugin(self.home, account.channel).create_adapter(account)
        adapter.on_message = self.on_message
        return adapter

    def load(self) -> None:
        """An adapter (not started yet) for every enabled account."""
        self._seen = signature(self.store.path)
        for account in self.store.load():
            if account.enabled:
                key = (account.channel, account.account_id)
                self.adapters[key] = self._adapter(account)
                self.account_of[key] = account

    async def start_all(self) -> None:
        for key, adapter in self.adapters.items():
            await adapter.start()
            self.log(f"channel-gateway: {key[0]}/{key[1]} started")
        self._report()

    def _report(self) -> None:
        self.status.write(list(self.adapters), self.failed, self._seen)

    async def stop_all(self) -> None:
        for adapter in self.adapters.values():
            with contextlib.suppress(Exception):
                await adapter.stop()
        self.status.clear()

    async def refresh(self) -> bool:
        """Re-read accounts.json if it changed since the last look; whether it did."""
        seen = signature(self.store.path)
        if seen == self._seen:
            return False
        self._seen = seen
        try:
            wanted = {(a.channel, a.account_id): a for a in self.store.load() if a.enabled}
        except TetherError as exc:  # a half-edited file: keep running what runs
            self.log(f"channel-gateway: accounts not reloaded: {exc}")
            self._report()
            return True
        self.failed = {}
        for key in list(self.adapters):
            new = wanted.get(key)
            if new is None or _restart_needed(self.account_of[key], new):
                adapter = self.adapters.pop(key)
                del self.account_of[key]
                with contextlib.suppress(Exception):
                    await adapter.stop()
                self.log(f"channel-gateway: {key[0]}/{key[1]} stopped")
            else:
                self.account_of[key] = new  # access settings apply from the next message
        for key, account in wanted.items():
            if key in self.adapters:
                continue
            try:
                adapter = self._adapter(account)
                await adapter.start()
            except Exception as exc:  # noqa: BLE001 - one account's failure spares the others
                self.failed[key] = f"{type(exc).__name__}: {exc}"
                self.log(f"channel-gateway: {key[0]}/{key[1]} did not start: {self.failed[key]}")
                continue
            self.adapters[key] = adapter
            self.account_of[key] = account
            self.log(f"channel-gateway: {key[0]}/{key[1]} started")
        self._report()
        return True

    async def watch(self, every: float = RELOAD_EVERY) -> None:
        while True:
            await asyncio.sleep(every)
            await self.refresh()
