"""A real `tether server` behind signed bearer tokens, for the attacks of a client scoped to one
conversation: the token, a turn that allows every approval, the server, and the two turns every
such attack runs (an unscoped one that leaves a canary in conversation B, then the scoped one)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import jwt
from websockets.asyncio.client import connect

from tests.security.support import CANARY_SECRET, World
from tests.server.support import Client, ServerProcess, server_env
from tether.backends.local.store import LocalStore
from tether.testing.fake_provider import FakeProvider

SECRET = b"scope-secret-" + b"x" * 32


def token(**claims: Any) -> dict[str, str]:
    body = {"exp": time.time() + 600, **claims}
    return {"Authorization": f"Bearer {jwt.encode(body, SECRET, algorithm='HS256')}"}


async def turn(c: Client, runtime: dict[str, str], text: str) -> dict[str, Any]:
    """Say `text`, allow every approval asked, return turn_finished."""
    await c.say(runtime, text)
    while True:
        frame = await c.wait_for(lambda f: f.get("type") in ("control_request", "turn_finished"),
                                 timeout=60)
        if frame["type"] == "turn_finished":
            return frame
        await c.answer(runtime, frame["request_id"], "allow")


def run_against_a_token_server(
    world: World,
    script: list[dict[str, Any]],
    attack: Callable[[str, FakeProvider], Awaitable[list[Any]]],
) -> list[Any]:
    """Start the server (signed-bearer-token auth) on the world's home and project with the
    fake provider playing `script`; what `attack(url, fake)` returns."""
    secret_file = world.root / "jwt-secret"
    secret_file.write_bytes(SECRET)
    os.chmod(secret_file, 0o600)
    with FakeProvider(script) as fake:
        env = server_env(fake.url, world.tether_home, world.root)
        server = ServerProcess(env, world.project, "--ws-auth", "signed-bearer-token",
                               "--ws-shared-secret-file", str(secret_file))
        try:
            return asyncio.run(attack(server.url, fake))
        finally:
            server.stop()


async def canary_in_conversation_b(url: str, world: World) -> tuple[str, Path]:
    """An unscoped client's turn that keeps the canary in a new conversation B: the agent and
    B's messages.jsonl (which holds the canary)."""
    async with connect(url, additional_headers=token(), open_timeout=10) as ws:
        admin = Client(ws)
        runtime_b = (await admin.start(world.project))["runtime"]
        finished = await turn(admin, runtime_b, f"keep this: {CANARY_SECRET}")
        assert finished["stop_reason"] == "end_turn", finished
    agent = runtime_b["agent_id"]
    store = LocalStore(world.tether_home)
    return agent, store.conversation_dir(agent, runtime_b["conversation_id"]) / "messages.jsonl"


async def scoped_turn(url: str, world: World, agent: str, conversation: str) -> Client:
    """A client whose token names only `conversation` starts it (sandboxed) and runs a turn
    ("go") to its end; the client, with every frame it saw."""
    scoped = token(agents=[agent], conversations=[conversation])
    async with connect(url, additional_headers=scoped, open_timeout=10) as ws:
        client = Client(ws)
        started = await client.start(world.project, agent_id=agent, conversation_id=conversation)
        assert started["workspace_sandbox"] is True
        finished = await turn(client, started["runtime"], "go")
        assert finished["stop_reason"] == "end_turn", finished
    return client
