"""The `api` object a mod's `activate(api)` receives: tools, permissions, providers, events.

Every `register` / `on` returns a disposer; the engine also records it on the mod's owner, so a
failing or reloaded mod loses exactly what it registered. Tools go into the same ToolRegistry
the built-ins use (a built-in name needs `override=True`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.core.tools import Effect, ToolRegistry, ToolResult, ToolRunContext

if TYPE_CHECKING:
    from tether.runtime.extensions.mods.engine import ModEngine, Owner

APPROVAL_POLICIES = ("ask", "auto", "alwaysAsk")
EVENTS = (
    "conversation_open", "conversation_close", "turn_start", "turn_end", "tool_start", "tool_end",
    "compact_start", "compact_end", "llm_start", "llm_end",
)
CAPABILITIES = frozenset({
    "tools", "providers", "permissions",
    "events.lifecycle", "events.turns", "events.tools", "events.compact", "events.llm",
})
_EVENT_CAPABILITY = {
    "conversation_open": "events.lifecycle", "conversation_close": "events.lifecycle",
    "turn_start": "events.turns", "turn_end": "events.turns",
    "tool_start": "events.tools", "tool_end": "events.tools",
    "compact_start": "events.compact", "compact_end": "events.compact",
    "llm_start": "events.llm", "llm_end": "events.llm",
}


class ModError(Exception):
    """A mod used the API wrongly (unknown event, missing capability, a malformed tool)."""


def capabilities_for(profile: str | None) -> frozenset[str]:
    """`TETHER_MOD_CAPABILITY_PROFILE=providers-only` (reflection-style children) keeps providers."""
    if profile == "providers-only":
        return frozenset({"providers"})
    return CAPABILITIES


@dataclass(frozen=True, slots=True)
class ModHost:
    """What the session lends its mods."""

    registry: Callable[[], ToolRegistry]  # the live registry (the run may replace it)
    cwd: Path
    agent_id: str | None
    conversation_id: str | None
    capabilities: frozenset[str] = CAPABILITIES
    tool_allowed: Callable[[str], bool] = lambda name: True  # --tools narrows mod tools as well


class ModTool:
    """A mod's tool as the turn engine sees it; results are normalised to a ToolResult."""

    external = False

    def __init__(self, inner: Any, mod: str, approval_policy: str, parallel_safe: bool | None) -> None:
        spec = inner if isinstance(inner, Mapping) else None
        name = spec.get("name") if spec is not None else getattr(inner, "name", None)
        run = spec.get("run") if spec is not None else getattr(inner, "run", None)
        if not isinstance(name, str) or not name.strip():
            raise ModError("a tool needs a non-empty string name")
        if not callable(run):
            raise ModError(f"tool {name!r} needs a run(args, ctx) function")
        if approval_policy not in APPROVAL_POLICIES:
            raise ModError(f"tool {name!r}: approval_policy must be one of {', '.join(APPROVAL_POLICIES)}")
        get = spec.get if spec is not None else (lambda key, default=None: getattr(inner, key, default))
        params = get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(params, dict):
            raise ModError(f"tool {name!r}: parameters must be a JSON schema object")
        effect = get("effect")
        if not isinstance(effect, Effect):
            effect = Effect.READ if parallel_safe else Effect.EXEC
        self.name = name
        self.description = str(get("description") or "")
        self.parameters = params
        self.effect = effect
        self.mod = mod
        self.approval_policy = approval_policy
        self._run = run
        self._paths = get("paths")

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return list(self._paths(args, cwd)) if callable(self._paths) else []

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        result = self._run(dict(args), ctx)
        if inspect.isawaitable(result):
            result = await result
        return normalize_result(result)


def normalize_result(value: Any) -> ToolResult:
    """A string, a list of content parts, a ToolResult, or `{content|output, stdout, stderr,
    status|isError|success}` (the reference's shapes)."""
    if isinstance(value, ToolResult):
        return value
    if value is None:
        return ToolResult("")
    if isinstance(value, str):
        return ToolResult(value)
    if isinstance(value, list):
        return ToolResult(_content_text(value))
    if isinstance(value, Mapping):
        body = value.get("content", value.get("output", ""))
        text = _content_text(body) if isinstance(body, list) else str(body)
        if "isError" in value:
            failed = bool(value["isError"])
        elif "success" in value:
            failed = not value["success"]
        else:
            failed = value.get("status") == "error"
        return ToolResult(text, failed, _lines(value.get("stdout")), _lines(value.get("stderr")))
    return ToolResult(str(value))


def _content_text(parts: list[Any]) -> str:
    return "\n".join(
        str(p.get("text", "")) if isinstance(p, Mapping) else str(p) for p in parts
    )


def _lines(value: Any) -> tuple[str, ...] | None:
    if isinstance(value, list | tuple):
        return tuple(str(v) for v in value)
    return None


def _two_args(fn: Callable[..., Any]) -> bool:
    """Handlers and checks may take (event) or (event, ctx)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params)


def adapt(fn: Callable[..., Any]) -> Callable[[Any, Any], Any]:
    if _two_args(fn):
        return fn
    return lambda event, ctx: fn(event)


class _Part:
    def __init__(self, api: ModApi) -> None:
        self._api = api
        self._engine = api._engine
        self._owner = api._owner

    def _need(self, capability: str) -> None:
        if capability not in self._api.capabilities:
            raise ModError(f"capability {capability!r} is not available in this session")


class ToolsApi(_Part):
    def register(
        self,
        tool: Any,
        *,
        approval_policy: str = "ask",
        parallel_safe: bool | None = None,
        override: bool = False,
    ) -> Callable[[], None]:
        self._need("tools")
        wrapped = ModTool(tool, self._owner.name, approval_policy, parallel_safe)
        host = self._api.host
        if not host.tool_allowed(wrapped.name):
            return lambda: None  # --tools did not name it: this run offers it nowhere
        registry = host.registry()
        return self._engine.register(self._owner, lambda: registry.register(wrapped, override=override))


class PermissionsApi(_Part):
    def register(self, id: str, check: Callable[..., Any]) -> Callable[[], None]:
        """`check(event[, ctx])` -> "allow" | "ask" | "alwaysAsk" | "deny" | {decision, reason} | None."""
        self._need("permissions")
        if not callable(check):
            raise ModError(f"permission check {id!r} must be callable")
        entry = (str(id), adapt(check))
        owner = self._owner

        def add() -> Callable[[], None]:
            owner.checks.append(entry)
            return lambda: owner.checks.remove(entry) if entry in owner.checks else None

        return self._engine.register(owner, add)


class ProvidersApi(_Part):
    def register(self, name: str, factory: Callable[..., Any]) -> Callable[[], None]:
        """`factory(model_id)` -> a Provider (the `stream(request)` contract of providers/base.py)."""
        self._need("providers")
        if not isinstance(name, str) or not name.strip() or "/" in name:
            raise ModError("a provider name must be a non-empty string without '/'")
        if not callable(factory):
            raise ModError(f"provider {name!r}: factory must be callable")
        engine, owner = self._engine, self._owner

        def add() -> Callable[[], None]:
            held = engine.providers.get(name)
            if held is not None and held[0].alive:
                raise ModError(f"provider {name!r} is already registered by mod {held[0].name}")
            engine.providers[name] = (owner, factory)

            def undo() -> None:
                if engine.providers.get(name, (None,))[0] is owner:
                    del engine.providers[name]

            return undo

        return engine.register(owner, add)


class EventsApi(_Part):
    def __init__(self, api: ModApi) -> None:
        super().__init__(api)
        self._disposers: dict[tuple[str, Any], Callable[[], None]] = {}

    def on(self, name: str, handler: Callable[..., Any]) -> Callable[[], None]:
        if name not in EVENTS:
            raise ModError(f"unknown event {name!r}; events: {', '.join(EVENTS)}")
        self._need(_EVENT_CAPABILITY[name])
        if not callable(handler):
            raise ModError(f"the {name} handler must be callable")
        adapted = adapt(handler)
        owner = self._owner

        def add() -> Callable[[], None]:
            owner.handlers.setdefault(name, []).append(adapted)

            def undo() -> None:
                listed = owner.handlers.get(name, [])
                if adapted in listed:
                    listed.remove(adapted)

            return undo

        dispose = self._engine.register(owner, add)
        self._disposers[(name, handler)] = dispose
        return dispose

    def off(self, name: str, handler: Callable[..., Any]) -> None:
        dispose = self._disposers.pop((name, handler), None)
        if dispose is not None:
            dispose()


class DiagnosticsApi(_Part):
    def report(self, message: str, level: str = "warning") -> None:
        self._engine.report(self._owner, str(message), level)


class ModApi:
    """Handed to `activate(api)`; `signal` is set when the mod is disposed or fails."""

    def __init__(self, engine: ModEngine, owner: Owner, host: ModHost) -> None:
        self._engine = engine
        self._owner = owner
        self.host = host
        self.name = owner.name
        self.generation = owner.generation
        self.capabilities = host.capabilities
        self.signal = owner.signal
        self.cwd = host.cwd
        self.agent_id = host.agent_id
        self.conversation_id = host.conversation_id
        self.tools = ToolsApi(self)
        self.permissions = PermissionsApi(self)
        self.providers = ProvidersApi(self)
        self.events = EventsApi(self)
        self.diagnostics = DiagnosticsApi(self)


@dataclass(frozen=True, slots=True)
class EventContext:
    """The second argument of a two-argument handler or check."""

    mod: str
    signal: Any  # threading.Event
    cwd: Path
    agent_id: str | None
    conversation_id: str | None
