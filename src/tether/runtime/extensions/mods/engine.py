"""The mod engine: discovery by source, loading in generations, owners and their failures.

A mod is trusted in-process Python (no isolation): a top-level `*.py` file or a package
directory with `__init__.py` in a mods folder, or a `tether.mods` entry point. Each loaded mod
is an `Owner`; everything it registers is recorded on it, so a failure in any phase (import,
activate, event, dispose) removes exactly its registrations, sets its signal and leaves the
other mods running. `reload()` disposes the current generation in reverse order, bumps
`generation` and loads afresh; a load that finishes after a newer generation started is
disposed at once, so two overlapping reloads never leave both generations registered.

Sources and shadow priority (a higher one hides a mod of the same name):

    bundled 1   tether/runtime/extensions/mods/bundled/ (none ship yet)
    installed 2 the `tether.mods` entry-point group of installed packages (cached: installed.py)
    global 3    $TETHER_MODS_DIR, else $TETHER_HOME/mods
    agent 4     $TETHER_HOME/agents/<agent id>/memory/mods
    project 5   <cwd>/.tether/mods, only when the folder is trusted
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson

from tether.errors import UsageError
from tether.runtime.extensions.mods.installed import ENTRY_POINT_GROUP, installed_mod_entry_points

PRIORITY = {"bundled": 1, "installed": 2, "global": 3, "agent": 4, "project": 5}
PHASES = ("import", "activate", "event", "dispose")
_TRUTHY = ("1", "true", "yes", "on")
_module_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class ModSpec:
    """One discovered mod: where it comes from and how to import it."""

    name: str
    source: str  # a PRIORITY key
    path: Path | None  # the file or package directory; None for an entry point
    entry_point: str | None = None  # "package.module:activate"

    @property
    def priority(self) -> int:
        return PRIORITY[self.source]

    @property
    def location(self) -> str:
        return str(self.path) if self.path is not None else f"entry point {self.entry_point}"


@dataclass(frozen=True, slots=True)
class Discovery:
    active: tuple[ModSpec, ...]  # winners, enabled, in load order
    shadowed: tuple[tuple[ModSpec, ModSpec], ...] = ()  # (hidden, the one that hides it)
    disabled: tuple[ModSpec, ...] = ()
    notes: tuple[str, ...] = ()  # e.g. project mods skipped because the folder is not trusted


@dataclass(frozen=True, slots=True)
class Diagnostic:
    mod: str
    phase: str  # PHASES, or "report" for a mod's own api.diagnostics.report
    message: str
    generation: int
    level: str = "error"

    def line(self) -> str:
        if self.phase == "report":
            return f"tether: mod {self.mod}: {self.message}"
        return f"tether: mod {self.mod} failed in {self.phase}: {self.message}"


# --- discovery -----------------------------------------------------------------------------


def mods_disabled(env: Mapping[str, str]) -> bool:
    return env.get("TETHER_DISABLE_MODS", "").strip().lower() in _TRUTHY


def global_mods_dir(home: Path, env: Mapping[str, str]) -> Path:
    value = env.get("TETHER_MODS_DIR")
    return Path(value).expanduser() if value else home / "mods"


def state_path(home: Path) -> Path:
    return home / "mods" / "state.json"


def read_disabled(home: Path) -> list[str]:
    """The `disabled` list of `$TETHER_HOME/mods/state.json` (`tether mods disable NAME`)."""
    path = state_path(home)
    try:
        doc = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return []
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON ({exc}); fix or delete it") from None
    names = doc.get("disabled") if isinstance(doc, dict) else None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise UsageError(f"{path}: expected {{\"disabled\": [\"mod name\", …]}}; fix or delete it")
    return names


def write_disabled(home: Path, names: Iterable[str]) -> None:
    path = state_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_bytes(orjson.dumps({"disabled": sorted(set(names))}, option=orjson.OPT_INDENT_2))
    tmp.replace(path)


def scan_dir(folder: Path, source: str) -> list[ModSpec]:
    """Top-level `*.py` files and packages (`<dir>/__init__.py`); dot-files never count."""
    try:
        entries = sorted(folder.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    out: list[ModSpec] = []
    for entry in entries:
        name = entry.name
        if name.startswith(".") or name == "__pycache__":
            continue
        if entry.is_file() and name.endswith(".py") and name != "__init__.py":
            stem = name[:-3]
            if stem.isidentifier():
                out.append(ModSpec(stem, source, entry))
        elif entry.is_dir() and (entry / "__init__.py").is_file() and name.isidentifier():
            out.append(ModSpec(name, source, entry))
    return out


def scan_entry_points(home: Path) -> list[ModSpec]:
    return [ModSpec(name, "installed", None, value) for name, value in installed_mod_entry_points(home)]


def agent_mods_dir(home: Path, agent_id: str) -> Path:
    return home / "agents" / agent_id / "memory" / "mods"


def candidates(
    home: Path, cwd: Path, env: Mapping[str, str], *, agent_id: str | None, project_trusted: bool
) -> tuple[list[ModSpec], list[str]]:
    """Every mod of every source, lowest priority first, and notes on skipped sources."""
    notes: list[str] = []
    found = scan_dir(Path(__file__).with_name("bundled"), "bundled")
    found += scan_entry_points(home)
    found += scan_dir(global_mods_dir(home, env), "global")
    if agent_id:
        found += scan_dir(agent_mods_dir(home, agent_id), "agent")
    project = scan_dir(cwd / ".tether" / "mods", "project")
    if project and not project_trusted:
        notes.append(
            f"ignoring {len(project)} project mod(s) in {cwd / '.tether' / 'mods'}: this folder is not "
            "trusted (run `tether trust` in the folder, or pass --trust)"
        )
    elif project:
        found += project
    return found, notes


def discover(
    home: Path, cwd: Path, env: Mapping[str, str], *, agent_id: str | None, project_trusted: bool
) -> Discovery:
    found, notes = candidates(home, cwd, env, agent_id=agent_id, project_trusted=project_trusted)
    winners: dict[str, ModSpec] = {}
    shadowed: list[tuple[ModSpec, ModSpec]] = []
    for spec in found:  # lowest priority first: a later one of higher (or equal) rank wins
        held = winners.get(spec.name)
        if held is not None and held.priority > spec.priority:
            shadowed.append((spec, held))
            continue
        if held is not None:
            shadowed.append((held, spec))
        winners[spec.name] = spec
    off = set(read_disabled(home))
    ordered = sorted(winners.values(), key=lambda s: (s.priority, s.name))
    return Discovery(
        tuple(s for s in ordered if s.name not in off),
        tuple(shadowed),
        tuple(s for s in ordered if s.name in off),
        tuple(notes),
    )


# --- owners --------------------------------------------------------------------------------


@dataclass(eq=False)
class Owner:
    """One loaded mod in one generation, and everything it registered."""

    spec: ModSpec
    generation: int
    signal: threading.Event = field(default_factory=threading.Event)
    disposers: list[Callable[[], None]] = field(default_factory=list)
    handlers: dict[str, list[Callable[..., Any]]] = field(default_factory=dict)
    checks: list[tuple[str, Callable[..., Any]]] = field(default_factory=list)
    module: ModuleType | None = None
    module_names: list[str] = field(default_factory=list)
    deactivate: Callable[[], Any] | None = None  # what activate returned

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def alive(self) -> bool:
        return not self.signal.is_set()


class ModEngine:
    """Loads mods into a host (its tool registry and its settings), one generation at a time.

    Registration, disposal and the generation counter share one lock; imports and `activate`
    run outside it, so a slow mod never blocks a concurrent reload."""

    def __init__(
        self,
        discover_specs: Callable[[], Discovery],
        make_api: Callable[[ModEngine, Owner], Any],
        *,
        report: Callable[[Diagnostic], None] | None = None,
    ) -> None:
        self._discover = discover_specs
        self._make_api = make_api
        self._report = report
        self._lock = threading.RLock()
        self.generation = 0
        self.owners: list[Owner] = []  # the committed generation, in load order
        self._loading: list[Owner] = []  # owners of loads still running
        self.diagnostics: list[Diagnostic] = []
        self.providers: dict[str, tuple[Owner, Callable[..., Any]]] = {}
        self.notes: tuple[str, ...] = ()

    # --- lifecycle -------------------------------------------------------------------------

    def load(self) -> int:
        return self.reload()

    def reload(self) -> int:
        with self._lock:
            self.generation += 1
            generation = self.generation
            previous = [*self.owners, *self._loading]
            self.owners = []
        for owner in reversed(previous):  # a load still running is disposed as well
            self._dispose(owner)
        discovery = self._discover()
        self.notes = discovery.notes
        loaded: list[Owner] = []
        for spec in discovery.active:
            with self._lock:
                if generation != self.generation:
                    break
                owner = Owner(spec, generation)
                self._loading.append(owner)
            if self._activate(owner):
                loaded.append(owner)
        with self._lock:
            for owner in loaded:
                if owner in self._loading:
                    self._loading.remove(owner)
            current = generation == self.generation
            if current:
                self.owners = [o for o in loaded if o.alive]
        if not current:  # a newer generation started while this one loaded
            for owner in reversed(loaded):
                self._dispose(owner)
        return generation

    def dispose_all(self) -> None:
        with self._lock:
            previous = [*self.owners, *self._loading]
            self.owners, self._loading = [], []
        for owner in reversed(previous):
            self._dispose(owner)

    def _activate(self, owner: Owner) -> bool:
        try:
            module = self._import(owner)
        except BaseException as exc:  # noqa: BLE001 - a broken mod must never take the session down
            if isinstance(exc, KeyboardInterrupt):
                raise
            self.fail(owner, "import", exc)
            return False
        activate = getattr(module, "activate", None)
        if not callable(activate):
            self.fail(owner, "import", TypeError("the module has no activate(api) function"))
            return False
        try:
            returned = activate(self._make_api(self, owner))
            if inspect.isawaitable(returned):
                _close(returned)
                raise TypeError("activate(api) must be a plain function; start async work from an event handler")
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, KeyboardInterrupt):
                raise
            self.fail(owner, "activate", exc)
            return False
        if returned is not None and not callable(returned):
            self.fail(owner, "activate", TypeError("activate(api) must return None or a disposer function"))
            return False
        with self._lock:
            owner.deactivate = returned
            stale = not owner.alive
        if stale:  # disposed by a newer generation while activate ran
            owner.deactivate = None
            if returned is not None:
                self._run_disposer(owner, returned)
            return False
        return True

    def _import(self, owner: Owner) -> ModuleType:
        spec = owner.spec
        if spec.entry_point is not None:
            from importlib.metadata import EntryPoint

            target = EntryPoint(spec.name, spec.entry_point, ENTRY_POINT_GROUP).load()
            if isinstance(target, ModuleType):
                return target
            module = ModuleType(f"tether_mod_{spec.name}")
            module.activate = target  # type: ignore[attr-defined]
            return module
        assert spec.path is not None
        # A fresh module name per load, so a reload imports the code as it is on disk now.
        unique = f"tether_mod_{spec.source}_{spec.name}_{next(_module_ids)}"
        package = spec.path.is_dir()
        file = spec.path / "__init__.py" if package else spec.path
        found = importlib.util.spec_from_file_location(
            unique, file, submodule_search_locations=[str(spec.path)] if package else None
        )
        if found is None or found.loader is None:
            raise ImportError(f"cannot import {file}")
        module = importlib.util.module_from_spec(found)
        sys.modules[unique] = module
        owner.module_names.append(unique)
        found.loader.exec_module(module)
        owner.module = module
        return module

    # --- failure and disposal --------------------------------------------------------------

    def fail(self, owner: Owner, phase: str, exc: BaseException) -> None:
        """A diagnostic with its phase; the owner's registrations go and its signal is set."""
        message = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        self._diagnose(Diagnostic(owner.name, phase, message, owner.generation))
        with self._lock:
            if owner in self.owners:
                self.owners.remove(owner)
        if phase != "dispose":
            self._dispose(owner)

    def report(self, owner: Owner, message: str, level: str = "warning") -> None:
        self._diagnose(Diagnostic(owner.name, "report", message, owner.generation, level))

    def _diagnose(self, diagnostic: Diagnostic) -> None:
        with self._lock:
            self.diagnostics.append(diagnostic)
        if self._report is not None:
            self._report(diagnostic)

    def _dispose(self, owner: Owner) -> None:
        with self._lock:
            if not owner.alive and not owner.disposers and owner.deactivate is None:
                return
            owner.signal.set()
            deactivate, owner.deactivate = owner.deactivate, None
            disposers, owner.disposers = owner.disposers, []
            owner.handlers.clear()
            owner.checks.clear()
            for name in [n for n, (o, _) in self.providers.items() if o is owner]:
                del self.providers[name]
            if owner in self._loading:
                self._loading.remove(owner)
        if deactivate is not None:
            self._run_disposer(owner, deactivate)
        for dispose in reversed(disposers):
            try:
                dispose()
            except Exception as exc:  # a registry disposer failing is ours, but keep going
                self._diagnose(Diagnostic(owner.name, "dispose", f"{type(exc).__name__}: {exc}", owner.generation))
        for name in owner.module_names:
            sys.modules.pop(name, None)
        owner.module_names.clear()

    def _run_disposer(self, owner: Owner, dispose: Callable[[], Any]) -> None:
        try:
            returned = dispose()
            if inspect.isawaitable(returned):
                _close(returned)
                raise TypeError("the disposer must be a plain function")
        except Exception as exc:
            self._diagnose(Diagnostic(owner.name, "dispose", f"{type(exc).__name__}: {exc}", owner.generation))

    # --- registrations (called by the api under the lock) ----------------------------------

    def register(self, owner: Owner, add: Callable[[], Callable[[], None]]) -> Callable[[], None]:
        """Run `add` (which registers something and returns its undo) for a live owner.

        A disposed owner (a failed mod, or an older generation still activating) registers
        nothing; the disposer it gets back does nothing."""
        with self._lock:
            if not owner.alive:
                return _noop
            undo = add()
            owner.disposers.append(undo)
        done = threading.Event()

        def dispose() -> None:
            with self._lock:
                if done.is_set():
                    return
                done.set()
                if undo in owner.disposers:
                    owner.disposers.remove(undo)
            undo()

        return dispose

    # --- dispatch --------------------------------------------------------------------------

    def live_owners(self) -> list[Owner]:
        with self._lock:
            return [o for o in self.owners if o.alive]

    def has_handlers(self, event: str) -> bool:
        return any(o.handlers.get(event) for o in self.live_owners())

    async def emit(
        self,
        event: str,
        payload: dict[str, Any],
        on_result: Callable[[Owner, Any], bool] | None = None,
        make_ctx: Callable[[Owner], Any] | None = None,
    ) -> None:
        """Call every live handler of `event` in load order; `on_result` returns True to stop.

        A handler that raises fails its mod (phase "event"); the others still run."""
        for owner in self.live_owners():
            for handler in list(owner.handlers.get(event, ())):
                if not owner.alive:
                    break
                try:
                    result = handler(payload, make_ctx(owner) if make_ctx is not None else None)
                    if inspect.isawaitable(result):
                        result = await result
                except Exception as exc:
                    self.fail(owner, "event", RuntimeError(f"{event} handler: {type(exc).__name__}: {exc}"))
                    break
                if result is not None and on_result is not None and on_result(owner, result):
                    return

    def provider(self, name: str) -> Callable[..., Any] | None:
        with self._lock:
            held = self.providers.get(name)
        return held[1] if held is not None and held[0].alive else None


def _noop() -> None:
    return None


def _close(awaitable: Any) -> None:
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()
