"""The Telegram channel, on python-telegram-bot's `Bot` (the `channels` extra), by long polling
or by webhook.

Polling acknowledges an update only by asking for the next ones with a higher `offset`, and the
adapter asks only after `on_message` has journaled every update of the batch, so a crash
re-delivers what was not journaled (and the journal drops what was). Webhook mode answers
Telegram's POST 200 only after journaling and checks `X-Telegram-Bot-Api-Secret-Token`.
`base_url` (config) points the SDK at another Bot API server (a local one, or a test fake).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
from typing import Any

import orjson

from tether.channels.config import Account
from tether.channels.plugins import InboundMessage, OnMessage, OutboundMessage, PluginMetadata
from tether.runtime.channel_catalog import BUNDLED

MAX_TEXT = 4096


class TelegramAdapter:
    channel_id = "telegram"

    def __init__(self, account: Account) -> None:
        cfg = account.config
        self.account_id = account.account_id
        self.id = f"telegram/{account.account_id}"
        self.name = account.display_name or self.id
        self.token = str(cfg["token"])
        self.base_url = str(cfg.get("base_url") or "https://api.telegram.org/bot")
        self.mode = str(cfg.get("mode", "polling"))
        self.poll_timeout = int(cfg.get("poll_timeout", 25))
        self.cfg = cfg
        self.on_message: OnMessage | None = None
        self.bot: Any = None
        self.username: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._http: Any = None
        self._running = False

    async def start(self) -> None:
        from telegram import Bot
        from telegram.request import HTTPXRequest

        self.bot = Bot(
            self.token, base_url=self.base_url,
            request=HTTPXRequest(connect_timeout=10, read_timeout=30),
            get_updates_request=HTTPXRequest(read_timeout=self.poll_timeout + 10),
        )
        await self.bot.initialize()  # getMe: a wrong token fails here, by name
        self.username = self.bot.username
        self._running = True
        if self.mode == "webhook":
            from tether.channels.http_inbound import InboundHTTP

            self._http = InboundHTTP(str(self.cfg.get("host", "127.0.0.1")),
                                     int(self.cfg.get("port", 0)), self._webhook)
            port = await self._http.start()
            print(f"channel-gateway: telegram/{self.account_id} webhook on port {port}",
                  flush=True)
        else:
            self._task = asyncio.ensure_future(self._poll())

    async def stop(self) -> None:
        self._running = False
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._http is not None:
            await self._http.stop()
        if self.bot is not None:
            with contextlib.suppress(Exception):
                await self.bot.shutdown()

    def is_running(self) -> bool:
        return self._running

    async def _poll(self) -> None:
        from telegram.error import TelegramError

        offset: int | None = None
        while self._running:
            try:
                updates = await self.bot.get_updates(
                    offset=offset, timeout=self.poll_timeout, allowed_updates=["message"]
                )
            except TelegramError as exc:
                print(f"channel-gateway: telegram getUpdates failed: {exc}", flush=True)
                await asyncio.sleep(2)
                continue
            for update in updates:
                await self._dispatch(update)
                offset = update.update_id + 1  # acknowledged by the next getUpdates

    async def _webhook(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, Any]]:
        from telegram import Update

        secret = str(self.cfg.get("secret_token", ""))
        given = headers.get("x-telegram-bot-api-secret-token", "")
        if not secret or not hmac.compare_digest(given.encode(), secret.encode()):
            return 401, {"ok": False, "error": "bad secret token"}
        try:
            update = Update.de_json(orjson.loads(body), self.bot)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            return 400, {"ok": False, "error": f"not a Telegram update ({exc})"}
        if update is not None:
            await self._dispatch(update)
        return 200, {"ok": True}

    async def _dispatch(self, update: Any) -> None:
        m = update.effective_message
        if m is None or not m.text or m.from_user is None:
            return
        direct = m.chat.type == "private"
        mention = bool(self.username) and f"@{self.username}".lower() in m.text.lower()
        replied = m.reply_to_message is not None and m.reply_to_message.from_user is not None \
            and m.reply_to_message.from_user.username == self.username
        assert self.on_message is not None
        await self.on_message(InboundMessage(
            "telegram", self.account_id, str(m.chat.id), str(m.from_user.id), m.text,
            m.date.timestamp(), f"{m.chat.id}:{m.message_id}",
            m.from_user.full_name or m.from_user.username,
            str(m.message_thread_id) if m.message_thread_id else None,
            "direct" if direct else "channel", mention or replied,
        ))

    async def send_message(self, msg: OutboundMessage) -> dict[str, Any]:
        reply_to = msg.reply_to_message_id
        if reply_to and ":" in reply_to:
            reply_to = reply_to.rsplit(":", 1)[1]
        ids: list[str] = []
        for part in split_text(msg.text):  # the Bot API takes 4096 characters a message
            sent = await self.bot.send_message(
                chat_id=msg.chat_id, text=part,
                message_thread_id=int(msg.thread_id) if msg.thread_id else None,
                reply_to_message_id=int(reply_to) if reply_to and not ids else None,
            )
            ids.append(f"{sent.chat.id}:{sent.message_id}")
        return {"message_id": ",".join(ids)}

    async def send_direct_reply(self, chat_id: str, text: str, **opts: Any) -> dict[str, Any]:
        return await self.send_message(OutboundMessage(chat_id, text, opts.get("thread_id")))


def split_text(text: str, limit: int = MAX_TEXT) -> list[str]:
    """`text` in pieces of at most `limit` characters, cut at a newline (else a space) when
    one is in the last quarter of the piece."""
    parts = []
    while len(text) > limit:
        cut = max(text.rfind("\n", 0, limit), text.rfind(" ", 0, limit))
        if cut < limit * 3 // 4:
            cut = limit
        parts.append(text[:cut])
        text = text[cut:].lstrip("\n ")
    return [*parts, text] if text or not parts else parts


class TelegramPlugin:
    metadata = PluginMetadata("telegram", *BUNDLED["telegram"])

    def create_adapter(self, account: Account) -> TelegramAdapter:
        return TelegramAdapter(account)


channel_plugin = TelegramPlugin()
