"""The channel slash commands (reference §14): `/status /pause /resume /cancel /chat /whoami`,
and the answers to approvals asked in the chat (`/approve <id>`, `/deny <id> [reason]`, or a
bare yes / no when one approval waits in that chat). Only allowed users reach here; pausing,
cancelling and answering approvals in a group also need an admin when the account has admins."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.channels.access import Verdict
from tether.channels.plugins import InboundMessage

if TYPE_CHECKING:
    from tether.channels.gateway import Gateway, PendingAsk

YES = {"yes", "y", "approve", "ok", "allow"}
NO = {"no", "n", "deny", "reject"}
HELP = ("Commands: /status, /pause, /resume, /cancel, /chat, /whoami, /approve <id>, "
        "/deny <id> [reason]")


class ChatCommands:
    def __init__(self, gateway: Gateway) -> None:
        self.gw = gateway

    def _asks_in(self, msg: InboundMessage) -> list[PendingAsk]:
        chat = (msg.channel, msg.account_id, msg.chat_id)
        return [a for a in self.gw.asks.values() if a.chat == chat]

    def is_answer(self, msg: InboundMessage) -> bool:
        return msg.text.strip().lower() in YES | NO and len(self._asks_in(msg)) == 1

    def answers_an_ask(self, msg: InboundMessage) -> bool:
        """A reply to an approval asked in this chat (a group needs no mention for it)."""
        head = msg.text.strip().split(maxsplit=1)[0].lower() if msg.text.strip() else ""
        return bool(self._asks_in(msg)) and (head in ("/approve", "/deny") or self.is_answer(msg))

    def _may_steer(self, msg: InboundMessage, verdict: Verdict) -> bool:
        account = self.gw.account_of[(msg.channel, msg.account_id)]
        return msg.chat_type == "direct" or verdict.admin or not account.admin_users

    async def run(self, msg: InboundMessage, verdict: Verdict) -> bool:
        """Handle a command; False when the text is not one (it goes to the agent)."""
        words = msg.text.strip().split(maxsplit=2)
        head = words[0].lower().split("@", 1)[0]  # /status@BotName in Telegram groups
        chat = (msg.channel, msg.account_id, msg.chat_id)
        gw = self.gw
        if head in YES | NO and self.is_answer(msg):
            return await self._answer(msg, verdict, self._asks_in(msg)[0], head in YES, "")
        if head in ("/approve", "/deny"):
            asks = self._asks_in(msg)
            ask = gw.asks.get(words[1]) if len(words) > 1 else (asks[0] if len(asks) == 1 else None)
            if ask is None or ask.chat != chat:
                await gw.say(msg, "No such approval waiting in this chat.")
                return True
            reason = words[2] if len(words) > 2 else ""
            return await self._answer(msg, verdict, ask, head == "/approve", reason)
        if head == "/whoami":
            role = "admin" if verdict.admin else "allowed user"
            await gw.say(msg, f"You are {msg.sender_id} ({role}) in chat {msg.chat_id} on "
                              f"{msg.channel}/{msg.account_id}.")
            return True
        route = gw.routes.lookup(msg.channel, msg.account_id, msg.chat_id)
        if head == "/chat":
            where = (f"agent {route.agent_id}, conversation {route.conversation_id}"
                     if route else "no agent (not routed)")
            await gw.say(msg, f"This chat talks to {where}.")
            return True
        if head == "/status":
            paused = " (paused)" if gw.journal.is_paused(chat) else ""
            waiting = len(self._asks_in(msg))
            await gw.say(msg, f"Gateway up{paused}; route: "
                              f"{route.key() if route else 'none'}; approvals waiting: {waiting}.")
            return True
        if head in ("/pause", "/resume", "/cancel"):
            if not self._may_steer(msg, verdict):
                await gw.say(msg, f"Only an admin may {head[1:]} in this chat.")
                return True
            if head == "/pause":
                gw.journal.pause(chat, True)
                await gw.say(msg, "Paused: messages here no longer reach the agent (/resume).")
            elif head == "/resume":
                gw.journal.pause(chat, False)
                await gw.say(msg, "Resumed.")
            else:
                await self._cancel(msg)
            return True
        if head == "/help":
            await gw.say(msg, HELP)
            return True
        return False

    async def _answer(
        self, msg: InboundMessage, verdict: Verdict, ask: PendingAsk, allow: bool, reason: str
    ) -> bool:
        if not self._may_steer(msg, verdict):
            await self.gw.say(msg, "Only an admin may answer approvals in this chat.")
            return True
        await self.gw.answer_ask(ask, allow, reason or f"answered by {msg.sender_id} in the chat")
        await self.gw.say(msg, "Approved." if allow else "Denied.")
        return True

    async def _cancel(self, msg: InboundMessage) -> None:
        route = self.gw.routes.lookup(msg.channel, msg.account_id, msg.chat_id)
        if route is None:
            await self.gw.say(msg, "Nothing to cancel.")
            return
        # The route's runtime on this connection (waiting for a start under way: a /cancel
        # right after the link came back must still reach the running turn).
        handle = await self.gw.ensure_runtime(route)
        answer = await self.gw.link.call({
            "type": "abort_message", "request_id": self.gw.link.request_id("abort"),
            "runtime": handle.runtime,
        })
        await self.gw.say(msg, "Cancelled the running turn." if answer.get("aborted")
                          else "Nothing was running.")
