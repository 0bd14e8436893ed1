"""The generic webhook channel: inbound HTTP POSTs signed with HMAC-SHA256 over the raw body
(`X-Tether-Signature: sha256=<hex>`), outbound POSTs (signed the same way) to a configured URL.

Inbound body: `{message_id, chat_id, sender_id, text, sender_name?, thread_id?, chat_type?,
is_mention?}`. The POST is answered 200 only after the gateway has journaled the message
(`{"ok": true}`); a bad or missing signature is 401 and nothing is recorded. Outbound body:
`{chat_id, text, thread_id, reply_to_message_id}`; the receiver may answer `{message_id}`.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
import urllib.request
from typing import Any

import orjson

from tether.channels.config import Account
from tether.channels.http_inbound import InboundHTTP
from tether.channels.plugins import InboundMessage, OnMessage, OutboundMessage, PluginMetadata
from tether.runtime.channel_catalog import BUNDLED

SIGNATURE_HEADER = "x-tether-signature"


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class WebhookAdapter:
    channel_id = "webhook"

    def __init__(self, account: Account) -> None:
        self.account_id = account.account_id
        self.id = f"webhook/{account.account_id}"
        self.name = account.display_name or self.id
        cfg = account.config
        self.secret = str(cfg["secret"])
        self.outbound_url = cfg.get("outbound_url")
        self.path = str(cfg.get("path", "/webhook"))
        self.http = InboundHTTP(str(cfg.get("host", "127.0.0.1")), int(cfg.get("port", 0)),
                                self._handle)
        self.on_message: OnMessage | None = None
        self._running = False

    async def start(self) -> None:
        port = await self.http.start()
        self._running = True
        print(f"channel-gateway: webhook/{self.account_id} listening on "
              f"http://{self.http.host}:{port}{self.path}", flush=True)

    async def stop(self) -> None:
        self._running = False
        await self.http.stop()

    def is_running(self) -> bool:
        return self._running

    async def _handle(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, Any]]:
        if path.split("?", 1)[0] != self.path:
            return 404, {"ok": False, "error": f"no such path; POST to {self.path}"}
        if method != "POST":
            return 405, {"ok": False, "error": "POST only"}
        given = headers.get(SIGNATURE_HEADER, "")
        if not hmac.compare_digest(given.encode(), sign(self.secret, body).encode()):
            return 401, {"ok": False, "error": "bad or missing X-Tether-Signature"}
        try:
            data = orjson.loads(body)
            msg = InboundMessage(
                "webhook", self.account_id, str(data["chat_id"]), str(data["sender_id"]),
                str(data["text"]), float(data.get("timestamp") or time.time()),
                str(data["message_id"]), data.get("sender_name"),
                str(data["thread_id"]) if data.get("thread_id") else None,
                "channel" if data.get("chat_type") == "channel" else "direct",
                bool(data.get("is_mention", False)), data,
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            return 400, {"ok": False, "error": f"body must be JSON with message_id, chat_id, "
                                               f"sender_id and text ({exc})"}
        assert self.on_message is not None
        await self.on_message(msg)  # journaled: only now is the POST acknowledged
        return 200, {"ok": True}

    async def send_message(self, msg: OutboundMessage) -> dict[str, Any]:
        if not self.outbound_url:
            raise RuntimeError("webhook account has no outbound_url configured")
        body = orjson.dumps({"chat_id": msg.chat_id, "text": msg.text,
                             "thread_id": msg.thread_id,
                             "reply_to_message_id": msg.reply_to_message_id})
        request = urllib.request.Request(
            str(self.outbound_url), body, method="POST",
            headers={"Content-Type": "application/json", "X-Tether-Signature":
                     sign(self.secret, body)},
        )

        def post() -> bytes:
            with urllib.request.urlopen(request, timeout=20) as response:  # noqa: S310
                return bytes(response.read())

        raw = await asyncio.to_thread(post)
        try:
            answer = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            answer = {}
        message_id = answer.get("message_id") if isinstance(answer, dict) else None
        return {"message_id": message_id or hashlib.sha256(body).hexdigest()[:16]}

    async def send_direct_reply(self, chat_id: str, text: str, **opts: Any) -> dict[str, Any]:
        return await self.send_message(OutboundMessage(chat_id, text, opts.get("thread_id")))


class WebhookPlugin:
    metadata = PluginMetadata("webhook", *BUNDLED["webhook"])

    def create_adapter(self, account: Account) -> WebhookAdapter:
        return WebhookAdapter(account)


channel_plugin = WebhookPlugin()
