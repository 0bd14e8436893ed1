"""A custom channel written against tether's plugin contract (test fixture): inbound messages
are JSON lines appended to `<dir>/inbox.jsonl`, replies are appended to `<dir>/outbox.jsonl`."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from tether.channels.plugins import InboundMessage, OutboundMessage, PluginMetadata


class FileDropAdapter:
    channel_id = "filedrop"

    def __init__(self, account: Any) -> None:
        self.account_id = account.account_id
        self.id = f"filedrop/{account.account_id}"
        self.name = self.id
        self.dir = Path(account.config["dir"])
        self.on_message: Any = None  # set by the host before start()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.ensure_future(self._watch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def is_running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def _watch(self) -> None:
        seen = 0
        inbox = self.dir / "inbox.jsonl"
        while True:
            lines = inbox.read_text().splitlines() if inbox.exists() else []
            for line in lines[seen:]:
                data = json.loads(line)
                await self.on_message(InboundMessage(
                    "filedrop", self.account_id, data["chat"], data["user"], data["text"],
                    time.time(), data["id"],
                ))
            seen = len(lines)
            await asyncio.sleep(0.1)

    async def send_message(self, msg: OutboundMessage) -> dict[str, Any]:
        with (self.dir / "outbox.jsonl").open("a") as fh:
            fh.write(json.dumps({"chat": msg.chat_id, "text": msg.text}) + "\n")
        return {"message_id": f"drop-{time.time_ns()}"}

    async def send_direct_reply(self, chat_id: str, text: str, **opts: Any) -> dict[str, Any]:
        return await self.send_message(OutboundMessage(chat_id, text))


class FileDropPlugin:
    metadata = PluginMetadata("filedrop", "File drop", [
        {"key": "dir", "type": "text", "required": True},
    ])

    def create_adapter(self, account: Any) -> FileDropAdapter:
        return FileDropAdapter(account)


channel_plugin = FileDropPlugin()
