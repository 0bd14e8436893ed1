"""The Slack channel over Socket Mode, on slack-sdk (the `channels` extra): the SDK's built-in
Socket Mode client (its own threads, no extra dependency) receives events, and `WebClient`
posts replies. An event's envelope is acknowledged only after `on_message` has journaled the
message (Slack redelivers what is not acknowledged; the journal drops the repeat). Messages in
channels get threads: a reply, and an approval asked, go in the thread of the message.
`base_url` (config) points the Web API client at another server (a test fake).
"""

from __future__ import annotations

import asyncio
from typing import Any

from tether.channels.config import Account
from tether.channels.plugins import InboundMessage, OnMessage, OutboundMessage, PluginMetadata
from tether.runtime.channel_catalog import BUNDLED

WEB_API = "https://slack.com/api/"
ACK_WAIT = 30.0  # seconds an event waits for the journal before it goes unacknowledged


class SlackAdapter:
    channel_id = "slack"

    def __init__(self, account: Account) -> None:
        cfg = account.config
        self.account_id = account.account_id
        self.id = f"slack/{account.account_id}"
        self.name = account.display_name or self.id
        self.bot_token = str(cfg["bot_token"])
        self.app_token = str(cfg["app_token"])
        self.base_url = cfg.get("base_url")
        self.on_message: OnMessage | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.web: Any = None
        self.client: Any = None
        self.bot_user: str | None = None

    async def start(self) -> None:
        from slack_sdk import WebClient
        from slack_sdk.socket_mode.builtin import SocketModeClient

        self.loop = asyncio.get_running_loop()
        self.web = WebClient(token=self.bot_token, base_url=str(self.base_url or WEB_API))
        auth = await asyncio.to_thread(self.web.auth_test)  # a wrong token fails here
        self.bot_user = auth.get("user_id")
        self.client = SocketModeClient(app_token=self.app_token, web_client=self.web)
        self.client.socket_mode_request_listeners.append(self._on_request)
        await asyncio.to_thread(self.client.connect)

    async def stop(self) -> None:
        if self.client is not None:
            await asyncio.to_thread(self.client.close)

    def is_running(self) -> bool:
        return self.client is not None and self.client.is_connected()

    def _on_request(self, client: Any, req: Any) -> None:
        """On the SDK's thread: journal on the gateway's loop, then acknowledge."""
        from slack_sdk.socket_mode.response import SocketModeResponse

        if req.type == "events_api":
            msg = self._inbound(req.payload.get("event") or {})
            if msg is not None and self.on_message is not None and self.loop is not None:
                done = asyncio.run_coroutine_threadsafe(_journal(self.on_message, msg), self.loop)
                done.result(ACK_WAIT)  # raises: no ack, Slack delivers it again
        client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))

    def _inbound(self, event: dict[str, Any]) -> InboundMessage | None:
        if event.get("type") != "message" or event.get("subtype") or event.get("bot_id"):
            return None
        user, text, channel, ts = (event.get(k) for k in ("user", "text", "channel", "ts"))
        if not (user and text and channel and ts) or user == self.bot_user:
            return None
        direct = event.get("channel_type") == "im"
        thread = event.get("thread_ts") or (None if direct else ts)
        return InboundMessage(
            "slack", self.account_id, str(channel), str(user), str(text), float(ts),
            f"{channel}:{ts}", None, str(thread) if thread else None,
            "direct" if direct else "channel",
            bool(self.bot_user) and f"<@{self.bot_user}>" in str(text), event,
        )

    async def send_message(self, msg: OutboundMessage) -> dict[str, Any]:
        answer = await asyncio.to_thread(
            self.web.chat_postMessage, channel=msg.chat_id, text=msg.text,
            thread_ts=msg.thread_id,
        )
        return {"message_id": f"{answer.get('channel', msg.chat_id)}:{answer.get('ts')}"}

    async def send_direct_reply(self, chat_id: str, text: str, **opts: Any) -> dict[str, Any]:
        return await self.send_message(OutboundMessage(chat_id, text, opts.get("thread_id")))


async def _journal(on_message: OnMessage, msg: InboundMessage) -> None:
    await on_message(msg)


class SlackPlugin:
    metadata = PluginMetadata("slack", *BUNDLED["slack"])

    def create_adapter(self, account: Account) -> SlackAdapter:
        return SlackAdapter(account)


channel_plugin = SlackPlugin()
