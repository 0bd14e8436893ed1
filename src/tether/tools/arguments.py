"""Checking a tool call's arguments: every bad value becomes a `ToolFailure` naming the argument.

The engine rejects calls missing required arguments before a tool runs, but models still send
strings for numbers, lists as JSON text and the like; each helper here turns that into a message
the model can act on instead of a traceback. Every string is also checked for what the OS or the
JSON encoder would choke on later: a NUL byte (no path or argv word can hold one), a lone UTF-16
surrogate (not encodable as UTF-8) and, for paths, a length no filesystem accepts.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tether.errors import ToolFailure


def _describe(value: object) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


# Linux's PATH_MAX: a longer path fails in the kernel anyway, with a less helpful message.
MAX_PATH_CHARS = 4096
_SURROGATE = re.compile("[\ud800-\udfff]")


def text_problem(
    value: str, *, allow_nul: bool = False, max_chars: int | None = None
) -> str | None:
    """What makes `value` unusable as an argument, or None: for the error message's tail."""
    if not allow_nul and "\0" in value:
        return f"contains a NUL byte (\\0) at character {value.index(chr(0))}"
    surrogate = _SURROGATE.search(value)
    if surrogate is not None:
        return (
            f"contains a lone UTF-16 surrogate (U+{ord(surrogate.group()):04X}) at character "
            f"{surrogate.start()}, which is not valid Unicode text"
        )
    if max_chars is not None and len(value) > max_chars:
        return f"is {len(value)} characters long (the limit is {max_chars})"
    return None


def checked_text(
    name: str, value: str, *, allow_nul: bool = False, max_chars: int | None = None
) -> str:
    problem = text_problem(value, allow_nul=allow_nul, max_chars=max_chars)
    if problem is not None:
        raise ToolFailure(f"Argument `{name}` {problem}; fix it and call the tool again.")
    return value


def require_str(
    args: Mapping[str, Any],
    name: str,
    *,
    allow_empty: bool = True,
    allow_nul: bool = False,
    max_chars: int | None = None,
) -> str:
    """`allow_nul` is for file content (old_string, content), never for paths or commands."""
    value = args.get(name)
    if value is None:
        raise ToolFailure(f"Missing required argument `{name}` (expected a string).")
    if not isinstance(value, str):
        raise ToolFailure(f"Argument `{name}` must be a string, got {_describe(value)}.")
    if not allow_empty and not value:
        raise ToolFailure(f"Argument `{name}` must not be empty.")
    return checked_text(name, value, allow_nul=allow_nul, max_chars=max_chars)


def optional_str(args: Mapping[str, Any], name: str, *, max_chars: int | None = None) -> str | None:
    value = args.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ToolFailure(f"Argument `{name}` must be a string, got {_describe(value)}.")
    return checked_text(name, value, max_chars=max_chars)


def require_path_text(args: Mapping[str, Any], name: str) -> str:
    """A non-empty path argument that the OS could open (no NUL, valid text, not over PATH_MAX)."""
    return require_str(args, name, allow_empty=False, max_chars=MAX_PATH_CHARS)


def optional_path_text(args: Mapping[str, Any], name: str) -> str | None:
    return optional_str(args, name, max_chars=MAX_PATH_CHARS)


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
    return [checked_text(f"{name}[{index}]", v) for index, v in enumerate(value)]


def resolve_path(value: str, cwd: Path) -> Path:
    """An absolute, normalised path; relative paths are taken from the tool call's cwd.

    Symlinks are left alone: permission checks canonicalise on their own, and the path shown back
    to the model should be the one it asked for.
    """
    expanded = os.path.expanduser(value)
    return Path(os.path.normpath(os.path.join(os.fspath(cwd), expanded)))


def usable_path_text(value: object) -> bool:
    """Whether `value` is a path string the OS can take (what `Tool.paths` may hand on)."""
    return (
        isinstance(value, str)
        and bool(value)
        and text_problem(value, max_chars=MAX_PATH_CHARS) is None
    )


def paths_from(args: Mapping[str, Any], name: str, cwd: Path, *, default_cwd: bool) -> list[Path]:
    """`Tool.paths` for tools whose path lives in one argument; never raises on bad input.

    A path the OS could not take (a NUL byte, a lone surrogate, over PATH_MAX) is left out: the
    permission layer would choke on it, and the tool itself refuses it with a clear error before
    touching anything, so there is nothing to judge.
    """
    value = args.get(name)
    if usable_path_text(value):
        assert isinstance(value, str)
        return [resolve_path(value, cwd)]
    if value is not None and value != "":
        return []
    return [resolve_path(".", cwd)] if default_cwd else []
