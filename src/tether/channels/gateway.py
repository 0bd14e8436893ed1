"""`tether channel-gateway`: the chat-channel gateway (reference §14), an App Server client.

Inbound: an adapter hands a message to `receive`, which journals it (the adapter acknowledges
the platform only after that), then the worker applies access control, the channel slash
commands and routing, and submits `input{create_message}` to the route's runtime with an
idempotency key made of the platform message id. Outbound: the gateway registers a per-runtime
external tool `MessageChannel`; the agent replies only by calling it, so a reply is a tool call
under the permission engine, hooks and effect checkpoints, and the gateway sends it once
(journal) to a chat that belongs to that runtime. Approvals the server asks for
(`control_request{can_use_tool}`) are asked in the chat and answered there by an allowed user.
Across a server restart the link reconnects, every route's runtime is started again (a runtime
started on an earlier connection is never used; a "not started on this connection" refusal
starts it and re-sends, it is never the user's answer), and `turns.py` decides what becomes of
the messages whose turn had not ended; a message is marked handled only once it was answered.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tether.channels import access
from tether.channels.agent_view import MESSAGE_CHANNEL, agent_text, describe_call
from tether.channels.commands import ChatCommands
from tether.channels.config import Account, AccountStore, PairingStore, Route, RouteTable
from tether.channels.journal import open_journal
from tether.channels.link import Frame, ServerLink
from tether.channels.live_accounts import LiveAccounts
from tether.channels.plugins import Adapter, InboundMessage, OutboundMessage
from tether.channels.turns import MessageTurns
from tether.errors import ReplyTaken, TetherError, UsageError

SEND_ATTEMPTS = 3
# How long a gateway whose reply another gateway is sending waits for that send's outcome: the
# other's attempts and their backoff (0.5 + 1 + 2 s) plus the platform's time.
REPLY_WAIT_S = 30.0
NOT_STARTED = "is not started on this connection"  # the server's words for a stale runtime
SUBMIT_ATTEMPTS = 3


@dataclass
class RuntimeHandle:
    route: Route
    runtime: dict[str, str]  # {agent_id, conversation_id}
    generation: int = 0  # the link connection it was started on


@dataclass
class PendingAsk:
    short: str
    request_id: str
    runtime: dict[str, str]
    chat: tuple[str, str, str]  # channel, account, chat_id
    thread_id: str | None
    route: Route | None = None  # whose runtime asked (started again on a new connection)


@dataclass
class Gateway:
    home: Path
    server_url: str
    token: str | None = None
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    store: str | None = None  # --store: the journal on this PostgreSQL store, shared

    def __post_init__(self) -> None:
        self.accounts = AccountStore(self.home)
        self.routes = RouteTable(self.home)
        self.pairing = PairingStore(self.home)
        self.journal = open_journal(self.home, self.store)
        # Kept in step with accounts.json while the gateway runs (`live_accounts.py`).
        self.live = LiveAccounts(self.home, self.receive)
        self.adapters: dict[tuple[str, str], Adapter] = self.live.adapters
        self.account_of: dict[tuple[str, str], Account] = self.live.account_of
        self.runtimes: dict[str, RuntimeHandle] = {}  # route key -> runtime
        self.asks: dict[str, PendingAsk] = {}
        self.answered_asks: set[str] = set()  # request ids answered here (never asked again)
        self.turns = MessageTurns(self.journal, self.say)
        self.link = ServerLink(self.server_url, self.token, self.on_frame, self.on_connect)
        self.commands = ChatCommands(self)
        self._wake = asyncio.Event()
        self._start_lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self.fatal: str | None = None  # why the gateway stopped by itself

    # --- lifecycle -------------------------------------------------------------------------

    def load_adapters(self) -> None:
        """An adapter for every enabled account; a plugin is imported only when configured."""
        self.live.load()
        if not self.adapters:
            raise UsageError("no channel account is configured: run `tether channels configure "
                             "<channel> ...` first")

    async def run(self, stop: asyncio.Event) -> None:
        self._stop = stop
        self.load_adapters()
        reader = asyncio.ensure_future(self.link.run())
        await asyncio.wait_for(self.link.connected.wait(), 30)
        await self.live.start_all()
        worker = asyncio.ensure_future(self.work())
        watcher = asyncio.ensure_future(self.live.watch())
        print("channel-gateway: ready", flush=True)
        try:
            await stop.wait()
        finally:
            worker.cancel()
            watcher.cancel()
            await self.live.stop_all()
            await self.link.close()
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
            self.journal.close()

    async def on_connect(self) -> None:
        """(Re)start every route's runtime with MessageChannel, so calls waiting for a
        gateway (one that crashed mid-reply) come to this one; messages whose turn had not
        ended when the last connection went away are submitted again (same idempotency key)."""
        self.runtimes.clear()
        generation = self.link.generation
        info = await self.link.call({"type": "app_server_info",
                                     "request_id": self.link.request_id("info")})
        if not (info.get("capabilities") or {}).get("runtime_external_tools_update"):
            self.fatal = (
                f"the App Server at {self.server_url} does not take client tools "
                "(capability runtime_external_tools_update), so agents could not reply; "
                "upgrade it"
            )
            self._stop.set()
            return
        for route in self.routes.load():
            if (route.channel, route.account_id) in self.adapters:
                try:
                    await self.ensure_runtime(route)
                except TetherError as exc:  # this route waits; the others work
                    print(f"channel-gateway: {exc}", flush=True)
        # After the starts, which report what a restarted server will not run again.
        self.turns.requeue_stale(generation)
        self._wake.set()

    # --- inbound ---------------------------------------------------------------------------

    async def receive(self, msg: InboundMessage) -> None:
        """Journal an inbound message (durable before the adapter acknowledges it)."""
        self.journal.receive(msg)
        self._wake.set()

    async def work(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            for seq, msg in self.journal.queued():
                try:
                    state = await self.handle(msg, seq)
                except (ConnectionError, TimeoutError) as exc:
                    print(f"channel-gateway: message {msg.message_id} waits: {exc}", flush=True)
                    await asyncio.sleep(1)
                    self._wake.set()
                    break
                except TetherError as exc:  # a route whose runtime cannot start: say so
                    state = "handled:error"
                    with contextlib.suppress(Exception):
                        await self.say(msg, f"The agent is unavailable: {exc}")
                except Exception as exc:  # noqa: BLE001 - e.g. the platform refused our answer
                    print(f"channel-gateway: message {msg.message_id}: "
                          f"{type(exc).__name__}: {exc}", flush=True)
                    state = "handled:error"
                self.journal.handled(seq, state)

    async def handle(self, msg: InboundMessage, seq: int = 0) -> str:
        account = self.account_of.get((msg.channel, msg.account_id))
        if account is None:
            return "handled:no-account"
        if not msg.is_mention and self.commands.answers_an_ask(msg):
            msg = replace(msg, is_mention=True)  # an answer in the chat the bot asked in
        verdict = access.decide(account, msg, self.env)
        if verdict.action in ("ignore", "deny"):
            return f"handled:{verdict.action}"
        if verdict.action == "pair":
            code = self.pairing.code_for(
                msg.channel, msg.account_id, msg.chat_id, msg.sender_id, msg.sender_name
            )
            await self.say(msg, (
                f"Hi! This agent does not know you yet. Your pairing code is {code}. Ask its "
                f"owner to run: tether channels pair {msg.channel} {code}"
            ))
            return "handled:pairing"
        text = msg.text.strip()
        if text.startswith("/") or self.commands.is_answer(msg):
            handled = await self.commands.run(msg, verdict)
            if handled:
                return "handled:command"
        chat = (msg.channel, msg.account_id, msg.chat_id)
        if self.journal.is_paused(chat):  # kept across restarts
            return "handled:paused"
        route = self.routes.lookup(msg.channel, msg.account_id, msg.chat_id)
        if route is None:
            await self.say(msg, (
                "This chat is not connected to an agent yet. Its owner can connect it with: "
                f"tether channels route add {msg.channel} {msg.chat_id} --agent <agent-id>"
            ))
            return "handled:unrouted"
        answer, generation = await self.submit(route, msg, seq)
        if answer.get("type") == "error" or not answer.get("accepted", False):
            why = answer.get("message") or answer.get("error") or "refused"
            await self.say(msg, f"The agent could not take your message: {why}")
            return "handled:refused"
        if generation != self.link.generation:
            return "queued"  # accepted on a link that is gone: `on_connect` missed it, send again
        state = await self.turns.accepted(msg, answer, route.key())
        if state.startswith("submitted:"):
            self.turns.submitted(seq, generation)
        return state

    async def submit(self, route: Route, msg: InboundMessage, seq: int) -> tuple[Frame, int]:
        """Send the message to the route's runtime; a runtime the server does not know on this
        connection (it restarted, or the link came back before the runtime was started again)
        is started again and the message re-sent, never refused to the user."""
        for _ in range(SUBMIT_ATTEMPTS):
            handle = await self.ensure_runtime(route)
            answer = await self.link.call({
                "type": "input",
                # The turn's `turn_finished` carries it back: which message's turn ended.
                "request_id": self.link.request_id(f"in-{seq}"),
                "idempotency_key": f"channel:{msg.channel}:{msg.account_id}:{msg.message_id}",
                "runtime": handle.runtime,
                "payload": {"kind": "create_message", "messages": [
                    {"role": "user", "content": agent_text(msg),
                     "client_message_id": f"channel-{msg.message_id}"}
                ]},
            })
            if answer.get("type") != "error" or NOT_STARTED not in str(answer.get("message")):
                return answer, handle.generation
            async with self._start_lock:
                if self.runtimes.get(route.key()) is handle:
                    del self.runtimes[route.key()]
        raise ConnectionError(f"route {route.key()}: the server keeps forgetting its runtime")

    async def ensure_runtime(self, route: Route) -> RuntimeHandle:
        handle, interrupted = await self._start_runtime(route)
        if interrupted:
            await self.turns.interrupted(interrupted)
        return handle

    async def _start_runtime(self, route: Route) -> tuple[RuntimeHandle, Any]:
        async with self._start_lock:
            handle = self.runtimes.get(route.key())
            if handle is not None and handle.generation == self.link.generation:
                return handle, None
            frame: Frame = {
                "type": "runtime_start", "request_id": self.link.request_id("start"),
                "agent_id": route.agent_id,
                "external_tools": [{"scope_id": f"channels:{route.key()}",
                                    "tools": [MESSAGE_CHANNEL]}],
            }
            made = self.journal.route_conversation(route.key(), route.agent_id)
            if route.conversation_id == "new" and made is None:
                frame["create_conversation"] = {}  # once: kept for the route from then on
            else:
                frame["conversation_id"] = made if route.conversation_id == "new" else (
                    route.conversation_id)
            cwd = route.cwd or self.cwd
            if cwd is not None:
                frame["cwd"] = cwd
            answer = await self.link.call(frame)
            if not answer.get("success"):
                raise TetherError(
                    f"route {route.key()}: runtime_start failed: "
                    f"{answer.get('error') or answer.get('message')}"
                )
            handle = RuntimeHandle(route, answer["runtime"], self.link.generation)
            if route.conversation_id == "new":
                self.journal.remember_conversation(
                    route.key(), route.agent_id, answer["runtime"]["conversation_id"]
                )
            self.runtimes[route.key()] = handle
            return handle, answer.get("interrupted_inputs")

    async def say(self, msg: InboundMessage, text: str) -> None:
        adapter = self.adapters[(msg.channel, msg.account_id)]
        await adapter.send_direct_reply(msg.chat_id, text, thread_id=msg.thread_id)

    # --- frames from the server ------------------------------------------------------------

    async def on_frame(self, frame: Frame) -> None:
        kind = frame.get("type")
        # The server sends a call waiting for this gateway, or an open approval, as soon as
        # runtime_start registers it, before its response: wait for starts under way, so the
        # runtime's route is known.
        async with self._start_lock:
            pass
        if kind == "external_tool_call_request":
            await self.send_reply(frame)
        elif kind == "control_request":
            await self.ask_in_chat(frame)
        elif kind == "turn_finished":
            await self.turns.finished(frame)

    def _route_of(self, runtime: dict[str, Any]) -> RuntimeHandle | None:
        for handle in self.runtimes.values():
            if handle.runtime == {k: runtime.get(k) for k in ("agent_id", "conversation_id")}:
                return handle
        return None

    async def send_reply(self, frame: Frame) -> None:
        """Carry out one MessageChannel call, at most once per tool call id."""
        tool_call_id = str(frame.get("tool_call_id"))
        answer = self._reply_result(frame, tool_call_id)
        if answer is None:
            answer = await self._send_new_reply(frame, tool_call_id)
        text, is_error = answer
        await self.link.send({
            "type": "external_tool_call_response", "request_id": frame["request_id"],
            "content": [{"type": "text", "text": text}], "is_error": is_error,
        })

    def _reply_result(self, frame: Frame, tool_call_id: str) -> tuple[str, bool] | None:
        known = self.journal.reply_state(tool_call_id)
        return None if known is None else _reply_answer(*known)

    async def _send_new_reply(self, frame: Frame, tool_call_id: str) -> tuple[str, bool]:
        args = frame.get("input") or {}
        channel, chat_id, text = args.get("channel"), args.get("chat_id"), args.get("text")
        if not (isinstance(channel, str) and isinstance(chat_id, str) and isinstance(text, str)
                and channel and chat_id and text):
            return "MessageChannel needs string 'channel', 'chat_id' and 'text'", True
        account_id = str(args.get("account") or "default")
        adapter = self.adapters.get((channel, account_id))
        if adapter is None:
            return f"no channel account {channel}/{account_id} is running in this gateway", True
        handle = self._route_of(frame.get("runtime") or {})
        if handle is None or not self._chat_belongs(handle, channel, account_id, chat_id):
            return (f"chat {channel}/{account_id}/{chat_id} is not routed to this "
                    "conversation; reply only to chats that wrote to it"), True
        out = OutboundMessage(chat_id, text, args.get("thread_id"), args.get("reply_to_message_id"))
        try:
            self.journal.reply_sending(tool_call_id, channel, account_id, chat_id)
        except ReplyTaken:  # another gateway on the journal is sending it: answer its outcome
            return await reply_outcome(self.journal, tool_call_id)
        error: Exception | None = None
        for attempt in range(SEND_ATTEMPTS):
            try:
                sent = await adapter.send_message(out)
            except Exception as exc:  # noqa: BLE001 - any platform failure is retried
                error = exc
                await asyncio.sleep(0.5 * 2**attempt)
                continue
            result = {"message_id": str(sent.get("message_id"))}
            self.journal.reply_settled(tool_call_id, "sent", result)
            return f"Sent (message id {result['message_id']})", False
        why = f"{type(error).__name__}: {error}"
        self.journal.reply_settled(tool_call_id, "failed", why)
        return f"Sending failed after {SEND_ATTEMPTS} attempts: {why}", True

    def _chat_belongs(self, handle: RuntimeHandle, channel: str, account: str, chat: str) -> bool:
        route = handle.route
        if (route.channel, route.account_id) != (channel, account):
            return False
        if route.chat_id == chat:
            return True
        return route.chat_id == "*" and (channel, account, chat) in self.journal.chats_of(
            route.key()
        )

    async def ask_in_chat(self, frame: Frame) -> None:
        request = frame.get("request") or {}
        if request.get("subtype") != "can_use_tool":
            return
        handle = self._route_of({"agent_id": frame.get("agent_id"),
                                 "conversation_id": frame.get("conversation_id")})
        if handle is None:
            return
        last = self.journal.last_chat(handle.route.key())
        if last is None:
            return
        rid = str(frame["request_id"])
        if rid in self.answered_asks or any(a.request_id == rid for a in self.asks.values()):
            return  # re-sent on reconnect: asked (or answered) already
        short = hashlib.sha256(rid.encode()).hexdigest()[:6]
        chat = (last["channel"], last["account_id"], last["chat_id"])
        self.asks[short] = PendingAsk(short, rid, handle.runtime, chat, last.get("thread_id"),
                                      handle.route)
        adapter = self.adapters[(chat[0], chat[1])]
        summary = describe_call(request.get("tool_name"), request.get("input"))
        await adapter.send_direct_reply(chat[2], (
            f"Approval needed: the agent wants to run {summary}. Reply `/approve {short}` or "
            f"`/deny {short} <reason>` (or yes / no)."
        ), thread_id=last.get("thread_id"))

    async def answer_ask(self, ask: PendingAsk, allow: bool, message: str) -> None:
        decision: dict[str, Any] = {"behavior": "allow" if allow else "deny"}
        if message or not allow:
            decision["message"] = message or "Denied in the chat"
        self.asks.pop(ask.short, None)
        self.answered_asks.add(ask.request_id)
        if ask.route is not None:  # the link may have come back since the question
            await self.ensure_runtime(ask.route)
        await self.link.send({
            "type": "input", "runtime": ask.runtime,
            "payload": {"kind": "approval_response", "request_id": ask.request_id,
                        "decision": decision},
        })


# --- the command --------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see `tether channel-gateway --help`)")


def run_channel_gateway(argv: Sequence[str]) -> int:
    p = _Parser(prog="tether channel-gateway",
                description="Connect the configured chat channels to agents on an App Server.")
    p.add_argument("--server", required=True, help="the App Server's ws:// URL")
    p.add_argument("--token-file", help="file holding the server's bearer token")
    p.add_argument("--cwd", help="working directory for routes that name none")
    p.add_argument("--store", help="a postgresql:// URL: keep the journal there, shared by every"
                   " gateway pointed at it (one answer per message across them)")
    try:
        ns = p.parse_args(list(argv))
        token = None
        if ns.token_file:
            try:
                token = Path(ns.token_file).read_text().strip()
            except OSError as exc:
                raise UsageError(f"--token-file {ns.token_file}: {exc.strerror}") from None
        from tether.runtime.session.session import tether_home

        gateway = Gateway(tether_home(os.environ), ns.server, token, ns.cwd, store=ns.store)
        return asyncio.run(_serve(gateway))
    except TetherError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1
    except TimeoutError:
        sys.stderr.write("Error: the App Server did not answer within 30 s\n")
        return 1


async def _serve(gateway: Gateway) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await gateway.run(stop)
    if gateway.fatal is not None:
        sys.stderr.write(f"Error: {gateway.fatal}\n")
        return 1
    return 0


async def reply_outcome(
    journal: Any, tool_call_id: str, wait_s: float = REPLY_WAIT_S
) -> tuple[str, bool]:
    """The answer for a reply another gateway is sending: its outcome once settled (polled, up
    to `wait_s`), else that it may have been delivered; never a second send."""
    deadline = time.monotonic() + wait_s
    while True:
        known = journal.reply_state(tool_call_id)
        if known is not None and (known[0] != "sending" or time.monotonic() >= deadline):
            return _reply_answer(*known)
        if known is None or time.monotonic() >= deadline:  # forgotten meanwhile: not sent here
            return ("Another gateway took this message and let it go; it was not sent, "
                    "so send it again if it is still wanted", True)
        await asyncio.sleep(0.1)


def _reply_answer(state: str, result: Any) -> tuple[str, bool]:
    if state == "sent":
        return f"Sent (message id {result.get('message_id')})", False
    if state == "failed":
        return f"Sending failed: {result}", True
    return ("The gateway stopped while sending this message; it may have been delivered, "
            "so it is not sent again", True)

