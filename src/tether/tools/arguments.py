"""Checking a tool call's arguments: every bad value becomes a `ToolFailure` naming the argument.

The engine rejects calls missing required arguments before a tool runs, but models still send
strings for numbers, lists as JSON text and the like; each helper here turns that into a message
the model can act on instead of a traceback.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tether.errors import ToolFailure


def _describe(value: object) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def require_str(args: Mapping[str, Any], name: str, *, allow_empty: bool = True) -> str:
    value = args.get(name)
    if value is None:
        raise ToolFailure(f"Missing required argument `{name}` (expected a string).")
    if not isinstance(value, str):
        raise ToolFailure(f"Argument `{name}` must be a string, got {_describe(value)}.")
    if not allow_empty and not value:
        raise ToolFailure(f"Argument `{name}` must not be empty.")
    return value


def optional_str(args: Mapping[str, Any], name: str) -> str | None:
    value = args.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ToolFailure(f"Argument `{name}` must be a string, got {_describe(value)}.")
    return value


def optional_bool(args: Mapping[str, Any], name: str, default: bool = False) -> bool:
    value = args.get(name)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    # Some models spell booleans as strings; accept the unambiguous spellings only.
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ToolFailure(
        f"Argument `{name}` must be a boolean (true or false), got {_describe(value)}."
    )


def optional_number(args: Mapping[str, Any], name: str) -> float | None:
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ToolFailure(f"Argument `{name}` must be a number, got {_describe(value)}.")
    return float(value)


def optional_int(args: Mapping[str, Any], name: str, *, minimum: int = 0) -> int | None:
    number = optional_number(args, name)
    if number is None:
        return None
    if not number.is_integer():
        raise ToolFailure(f"Argument `{name}` must be a whole number, got {args.get(name)!r}.")
    if number < minimum:
        raise ToolFailure(f"Argument `{name}` must be at least {minimum}, got {int(number)}.")
    return int(number)


def optional_str_list(args: Mapping[str, Any], name: str) -> list[str]:
    value = args.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ToolFailure(f"Argument `{name}` must be a list of strings, got {_describe(value)}.")
    return list(value)


def resolve_path(value: str, cwd: Path) -> Path:
    """An absolute, normalised path; relative paths are taken from the tool call's cwd.

    Symlinks are left alone: permission checks canonicalise on their own, and the path shown back
    to the model should be the one it asked for.
    """
    expanded = os.path.expanduser(value)
    return Path(os.path.normpath(os.path.join(os.fspath(cwd), expanded)))


def paths_from(args: Mapping[str, Any], name: str, cwd: Path, *, default_cwd: bool) -> list[Path]:
    """`Tool.paths` for tools whose path lives in one argument; never raises on bad input."""
    value = args.get(name)
    if isinstance(value, str) and value:
        return [resolve_path(value, cwd)]
    return [resolve_path(".", cwd)] if default_cwd else []
