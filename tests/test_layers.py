"""The layer rule of DESIGN §2 as a test: every import in src/tether points down a layer.

Every import statement is parsed (module level, inside functions, under TYPE_CHECKING), so a
lazy import cannot hide an upward or sideways dependency. What breaks the rule today is listed
in ALLOWED with its reason; an entry that no longer occurs fails too, so the list only shrinks.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tether"

# Package -> layer (DESIGN §2). `testing` ships fakes and may import protocol and core only.
LAYERS = {
    "protocol": 0, "errors": 0,
    "core": 1,
    "providers": 2, "backends": 2, "tools": 2, "sandbox": 2, "memory": 2, "mcp": 2,
    "runtime": 3,
    "cli": 4, "tui": 4, "server": 4, "channels": 4,
}
TESTING_MAY_IMPORT = {"protocol", "errors", "core", "testing"}
# The package root (tether/__init__.py, __main__.py) is the entry point: it may import anything.
ROOT = "tether"

# (importing module, imported module) -> why it is allowed (for now).
CLI_DISPATCH = "the console script dispatches to the frontend or subcommand the user chose"
BACKEND_WIRE = ("a backend is one provider call per send: it speaks through the providers' "
                "Provider protocol, HTTP client, SSE parser and retry policy")
ALLOWED: dict[tuple[str, str], str] = {
    # L4 sideways
    ("tether.cli.main", "tether.tui.app"): CLI_DISPATCH,
    ("tether.cli.channels_cmd", "tether.channels.config"): CLI_DISPATCH,
    ("tether.cli.channels_cmd", "tether.channels.plugins"): CLI_DISPATCH,
    ("tether.cli.server_cmd", "tether.server.app_server"): CLI_DISPATCH,
    ("tether.cli.server_cmd", "tether.server.auth"): "`tether server`'s auth flags become its policy",
    ("tether.cli.server_cmd", "tether.server.runtime_start"): "`--cwd` is checked before start",
    # L0 sideways
    ("tether.protocol.messages", "tether.errors"): "every layer raises the one error tree",
    # L2 sideways: kept pairs
    ("tether.backends.api.backend", "tether.providers.retry"): BACKEND_WIRE,
    ("tether.backends.api.client", "tether.providers.http"): BACKEND_WIRE,
    ("tether.backends.api.client", "tether.providers.sse"): BACKEND_WIRE,
    ("tether.backends.api.client", "tether.providers.transport"): BACKEND_WIRE,
    ("tether.backends.local.backend", "tether.providers.base"): BACKEND_WIRE,
    ("tether.backends.local.compaction", "tether.providers.base"): BACKEND_WIRE,
    ("tether.mcp.tools", "tether.tools.output"):
        "MCP results overflow to a file exactly as built-in tools' output does",
    ("tether.memory.memfs", "tether.backends.local.disk_full"):
        "a git command a full disk refused is named as one, like every other store's write",
    ("tether.memory.memfs", "tether.backends.local.locks"):
        "the memory repo takes the same cross-process lock primitive as the store",
    ("tether.tools.memory", "tether.memory.blocks"): "the memory tool edits memory blocks",
    ("tether.tools.memory", "tether.memory.memfs"): "the memory tool edits the memory repo",
    ("tether.tools.memory_patch", "tether.memory.blocks"): "memory_apply_patch edits memory blocks",
    ("tether.tools.memory_patch", "tether.memory.memfs"): "memory_apply_patch edits the memory repo",
    ("tether.tools.process_group", "tether.sandbox.policy"):
        "the shell tool runs its commands through the kernel sandbox",
    ("tether.tools.process_group", "tether.sandbox.detect"):
        "the shell tool runs its commands through the kernel sandbox",
}


def _package(module: str) -> str:
    parts = module.split(".")
    if parts[0] != "tether":
        return ""
    if len(parts) == 1:
        return ROOT
    return parts[1] if parts[1] in LAYERS or parts[1] == "testing" else ROOT


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> Iterator[str]:
    """Every tether module `path` imports, relative imports resolved, `from pkg import mod`
    naming the submodule."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    here = _module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                rel = Path(*sub.split(".")[1:]) if sub.startswith("tether.") else None
                is_module = rel is not None and (
                    (SRC / rel).is_dir() or (SRC / rel).with_suffix(".py").exists()
                )
                yield sub if is_module else base


def edges() -> set[tuple[str, str]]:
    found = set()
    for path in sorted(SRC.rglob("*.py")):
        source = _module_name(path)
        for target in _imports(path):
            if target.startswith("tether.") or target == "tether":
                found.add((source, target))
    return found


def breaks_rule(source: str, target: str) -> bool:
    src, dst = _package(source), _package(target)
    if src in (dst, ROOT):
        return False
    if dst == ROOT:
        return target != "tether"  # the package itself is data (__version__); __main__ is not
    if src == "testing":
        return dst not in TESTING_MAY_IMPORT
    if dst == "testing":
        return True  # shipped fakes are for tests, never for the product
    assert src in LAYERS and dst in LAYERS, f"{source} -> {target}: package missing from LAYERS"
    return LAYERS[dst] >= LAYERS[src]


def violations() -> set[tuple[str, str]]:
    return {e for e in edges() if breaks_rule(*e)}


def package_cycles() -> list[set[str]]:
    """Strongly connected groups of packages (Tarjan), from every import."""
    graph: dict[str, set[str]] = {}
    for s, t in edges():
        a, b = _package(s), _package(t)
        if a != b and ROOT not in (a, b):
            graph.setdefault(a, set()).add(b)
            graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups




def test_the_parser_sees_lazy_and_type_checking_imports(tmp_path: Path) -> None:
    found = edges()
    # cli/main.py imports its run paths inside functions; assembly names hooks under TYPE_CHECKING
    assert ("tether.cli.main", "tether.cli.headless") in found
    assert ("tether.runtime.session.assembly", "tether.runtime.extensions.hooks") in found


def test_no_import_goes_up_or_sideways_beyond_the_allowed_list() -> None:
    new = sorted(violations() - set(ALLOWED))
    assert not new, "imports that break DESIGN §2's layers:\n" + "\n".join(
        f"  {s} -> {t}" for s, t in new
    )


def test_the_allowed_list_only_names_imports_that_still_exist() -> None:
    stale = sorted(set(ALLOWED) - violations())
    assert not stale, "no longer needed, remove from ALLOWED:\n" + "\n".join(
        f"  {s} -> {t}" for s, t in stale
    )


def test_no_package_cycle() -> None:
    cycles = package_cycles()
    assert not cycles, f"packages that import each other: {cycles}"
