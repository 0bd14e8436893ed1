"""The Glob and Grep tools: find files by name pattern, and search file contents with Python `re`.

Both list files with ripgrep (`tools.ripgrep`: `.gitignore`/`.ignore` respected, `.git` skipped,
links not followed), which also narrows Grep to the files that may match; every candidate is
checked and read by tether itself. Binary files and files over 5 MiB are skipped, and Grep's
answer is capped at 10,000 chars.
"""

from __future__ import annotations

import asyncio
import bisect
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tether.core.tools import Effect, ToolResult, ToolRunContext
from tether.errors import ToolFailure
from tether.tools.arguments import (
    optional_bool,
    optional_int,
    optional_path_text,
    optional_str,
    paths_from,
    require_str,
    resolve_path,
    usable_path_text,
)
from tether.tools.boundary import ReadBoundary, boundary_for
from tether.tools.confined import open_regular, read_fd
from tether.tools.globbing import GlobMatcher, split_literal_root, walk_files
from tether.tools.grep_schema import (
    FILE_TYPES,
    GREP_DESCRIPTION,
    GREP_PARAMETERS,
    OUTPUT_MODES,
    TYPE_ALIASES,
)
from tether.tools.output import error_result
from tether.tools.ripgrep import files_matching, list_files, rg_binary

GLOB_MAX_FILES = 100
GREP_OUTPUT_CAP = 10_000
GREP_MAX_FILE_BYTES = 5 * 1024 * 1024
GREP_LINE_CHARS = 1000
# Patterns longer than any a person writes: refused before they reach `re` (compile time, memory).
GREP_PATTERN_MAX_CHARS = 20_000
GLOB_MAX_CHARS = 4096
_SNIFF_BYTES = 8192
NO_FILES = "No files found"
NO_MATCHES = "No matches found"


def _absolute_root(args: Mapping[str, Any], cwd: Path) -> Path:
    return resolve_path(optional_path_text(args, "path") or ".", cwd)


# -- Glob ------------------------------------------------------------------------------------

GLOB_DESCRIPTION = """\
Fast file-name pattern matching over a directory tree.

- Supports glob patterns such as `**/*.py`, `src/**/*.{ts,tsx}` or `*.md`. A pattern without a \
slash matches file names at any depth; one with a slash matches paths from the search root.
- Returns absolute file paths, most recently modified first, at most 100 (narrow the pattern or \
`path` if the result is truncated). `.git` is skipped.
- Use it to find files by name; use Grep to search inside files. For open-ended exploration \
that needs several rounds of searching, consider an Agent."""

GLOB_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "pattern": {"type": "string", "description": "The glob pattern to match files against"},
        "path": {
            "type": "string",
            "description": (
                "The directory to search in. If not specified, the current working directory is "
                "used. Omit it for the default; do not pass 'undefined' or 'null'."
            ),
        },
    },
    "required": ["pattern"],
    "additionalProperties": False,
}


def _require_directory(path: Path) -> None:
    if not path.exists():
        raise ToolFailure(f"Directory does not exist: {path}")
    if not path.is_dir():
        raise ToolFailure(f"{path} is not a directory; give a directory as `path`.")


class GlobTool:
    name = "Glob"
    description = GLOB_DESCRIPTION
    parameters = GLOB_PARAMETERS
    effect = Effect.READ

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        # An absolute or `../` pattern searches outside `path`: permission checks must see where.
        bases = paths_from(args, "path", cwd, default_cwd=True)
        pattern = args.get("pattern")
        if not bases:
            return []
        if usable_path_text(pattern):
            assert isinstance(pattern, str)
            return [split_literal_root(pattern, bases[0])[0]]
        return [] if pattern not in (None, "") else bases

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        try:
            pattern = require_str(args, "pattern", allow_empty=False, max_chars=GLOB_MAX_CHARS)
            base = _absolute_root(args, ctx.cwd)
            _require_directory(base)
            root, rest = split_literal_root(pattern, base)
            matcher = GlobMatcher.compile(rest)
            boundary = boundary_for(ctx)
            if root.is_dir():
                boundary.refuse_walk("Glob", root)
        except ToolFailure as exc:
            return error_result(str(exc))
        except re.error as exc:
            return error_result(f"Invalid glob pattern {pattern[:200]!r}: {exc}")
        return ToolResult(
            await asyncio.to_thread(glob_files, root, matcher, ctx.abort.is_set, boundary)
        )


def glob_files(
    root: Path,
    matcher: GlobMatcher,
    should_stop: Callable[[], bool],
    boundary: ReadBoundary | None = None,
) -> str:
    if not root.is_dir():
        return NO_FILES
    found: list[tuple[float, str]] = []
    listed = list_files(root, should_stop, _narrow(boundary, root))
    if listed is not None:  # ripgrep: ignore files respected
        found = [(-f.mtime, f.path) for f in listed if matcher.matches(f.relative)]
    else:
        for walked in walk_files(root, should_stop=should_stop, boundary=boundary):
            if matcher.matches(walked.relative):
                try:
                    mtime = walked.entry.stat().st_mtime
                except OSError:
                    continue
                found.append((-mtime, walked.path))
    if not found:
        return NO_FILES
    found.sort()
    lines = [path for _, path in found[:GLOB_MAX_FILES]]
    if len(found) > GLOB_MAX_FILES:
        lines.append(
            f"(Results are truncated: showing the {GLOB_MAX_FILES} most recently modified of "
            f"{len(found)} files. Use a more specific pattern or path.)"
        )
    return "\n".join(lines)


# -- Grep ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GrepQuery:
    regex: re.Pattern[str]
    root: Path
    mode: str = "files_with_matches"
    glob: GlobMatcher | None = None
    extensions: tuple[str, ...] | None = None
    before: int = 0
    after: int = 0
    line_numbers: bool = True
    multiline: bool = False
    head_limit: int = 0
    offset: int = 0
    # Files a deny rule protects (`services.read_denied`): never opened, never listed.
    skip: Callable[[Path], bool] | None = None
    # What no file tool shows (the sandbox's hidden paths, tether's own state): see `boundary`.
    boundary: ReadBoundary | None = None


def parse_grep_args(args: Mapping[str, Any], cwd: Path) -> GrepQuery:
    pattern = require_str(args, "pattern", allow_empty=False, max_chars=GREP_PATTERN_MAX_CHARS)
    mode = optional_str(args, "output_mode") or "files_with_matches"
    if mode not in OUTPUT_MODES:
        raise ToolFailure(
            f"Argument `output_mode` must be one of {', '.join(OUTPUT_MODES)}, got {mode!r}."
        )
    extensions = None
    type_name = optional_str(args, "type")
    if type_name:
        key = TYPE_ALIASES.get(type_name.lower(), type_name.lower())
        if key not in FILE_TYPES:
            raise ToolFailure(
                f"Unknown file type {type_name!r} for argument `type`; known types: "
                f"{', '.join(sorted(FILE_TYPES))}. Use `glob` for anything else."
            )
        extensions = FILE_TYPES[key]
    glob_pattern = optional_str(args, "glob", max_chars=GLOB_MAX_CHARS)
    context = optional_int(args, "-C") or 0
    before = optional_int(args, "-B")
    after = optional_int(args, "-A")
    multiline = optional_bool(args, "multiline")
    flags = re.IGNORECASE if optional_bool(args, "-i") else 0
    if multiline:
        flags |= re.DOTALL | re.MULTILINE
    try:
        try:
            regex = re.compile(pattern, flags)
        except RecursionError:  # thousands of nested groups: a clear error, not a traceback
            raise re.error("groups are nested too deeply") from None
    except re.error as exc:
        raise ToolFailure(
            f"Invalid regex pattern {pattern[:200]!r}: {exc}. Escape literal special characters "
            "with a backslash."
        ) from None
    try:
        glob = GlobMatcher.compile(glob_pattern) if glob_pattern else None
    except re.error as exc:
        raise ToolFailure(f"Invalid glob pattern {(glob_pattern or '')[:200]!r}: {exc}") from None
    return GrepQuery(
        regex=regex,
        root=_absolute_root(args, cwd),
        mode=mode,
        glob=glob,
        extensions=extensions,
        before=context if before is None else before,
        after=context if after is None else after,
        line_numbers=optional_bool(args, "-n", True),
        multiline=multiline,
        head_limit=optional_int(args, "head_limit") or 0,
        offset=optional_int(args, "offset") or 0,
    )


class GrepTool:
    name = "Grep"
    description = GREP_DESCRIPTION
    parameters = GREP_PARAMETERS
    effect = Effect.READ

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return paths_from(args, "path", cwd, default_cwd=True)

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        try:
            query = parse_grep_args(args, ctx.cwd)
            denied = ctx.services.read_denied
            boundary = boundary_for(ctx)
            query = replace(query, boundary=boundary.narrowed(os.path.realpath(query.root)))
            if query.root.is_dir():
                boundary.refuse_walk("Grep", query.root)
            if callable(denied):
                query = replace(query, skip=denied)
            if not query.root.exists():
                raise ToolFailure(f"Path does not exist: {query.root}")
            if not query.root.is_dir():  # one named file: say why it cannot be searched
                os.close(_open_candidate(query.root, query.boundary))
        except ToolFailure as exc:
            return error_result(str(exc))
        return ToolResult(await asyncio.to_thread(grep, query, ctx.abort.is_set))


def _narrow(boundary: ReadBoundary | None, root: Path) -> ReadBoundary | None:
    return boundary.narrowed(os.path.realpath(root)) if boundary is not None else None


def _listed_candidates(query: GrepQuery, should_stop: Callable[[], bool]) -> list[tuple[Path, float]] | None:
    """Candidates from ripgrep (ignore files respected, non-matching files already dropped), or
    None without it. The glob, type, deny and size filters apply here as in the walk."""
    if query.multiline:  # rg's multi-line dialect differs from `re`'s: let `re` see every file
        listed = list_files(query.root, should_stop, query.boundary)
    else:
        listed = files_matching(
            query.root, query.regex.pattern, ignore_case=bool(query.regex.flags & re.IGNORECASE),
            should_stop=should_stop, boundary=query.boundary, max_bytes=GREP_MAX_FILE_BYTES,
        )  # fmt: skip
        if listed is None and rg_binary() is not None:
            listed = list_files(query.root, should_stop, query.boundary)
    if listed is None:
        return None
    found: list[tuple[Path, float]] = []
    for item in listed:
        if query.glob is not None and not query.glob.matches(item.relative):
            continue
        if query.extensions is not None and not item.relative.endswith(query.extensions):
            continue
        if query.skip is not None and query.skip(Path(item.path)):
            continue
        if item.size <= GREP_MAX_FILE_BYTES:
            found.append((Path(item.path), item.mtime))
    found.sort(key=lambda pair: str(pair[0]))  # the walk's order: stable output across runs
    return found


def _candidates(query: GrepQuery, should_stop: Callable[[], bool]) -> list[tuple[Path, float]]:
    if query.root.is_file():
        return [(query.root, query.root.stat().st_mtime)]
    listed = _listed_candidates(query, should_stop)
    if listed is not None:
        return listed
    found: list[tuple[Path, float]] = []
    walk = walk_files(query.root, should_stop=should_stop, boundary=query.boundary)
    for walked in walk:
        if query.glob is not None and not query.glob.matches(walked.relative):
            continue
        if query.extensions is not None and not walked.entry.name.endswith(query.extensions):
            continue
        if query.skip is not None and query.skip(Path(walked.path)):
            continue
        try:
            info = walked.entry.stat()
        except OSError:
            continue
        if info.st_size <= GREP_MAX_FILE_BYTES:
            found.append((Path(walked.path), info.st_mtime))
    return found


def _open_candidate(path: Path, boundary: ReadBoundary | None, walked: bool = False) -> int:
    try:
        return open_regular(path, tool="Grep", boundary=boundary, known_regular=walked)
    except (FileNotFoundError, IsADirectoryError) as exc:
        raise ToolFailure(f"Could not search {path}: {exc.strerror or exc}") from None


def _load(path: Path, boundary: ReadBoundary | None, walked: bool) -> list[str] | None:
    """The file's lines, or None for unreadable, binary, hidden and non-regular files."""
    try:
        fd = _open_candidate(path, boundary, walked)
    except ToolFailure:
        return None
    try:
        # A file met on a walk with other names (hard links) may be a secret or a denied file
        # under another name; the permission check only saw the folder, so it is skipped.
        if walked and os.fstat(fd).st_nlink > 1:
            return None
        # Bounded on the open file: the walk's size may be stale, or the name swapped since.
        data = read_fd(fd, GREP_MAX_FILE_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > GREP_MAX_FILE_BYTES or b"\0" in data[:_SNIFF_BYTES]:
        return None
    lines = data.decode("utf-8", errors="replace").replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def matching_lines(query: GrepQuery, lines: list[str], *, first_only: bool = False) -> list[int]:
    """Indices of lines holding (part of) a match."""
    if not query.multiline:
        hits: list[int] = []
        for index, line in enumerate(lines):
            if query.regex.search(line):
                hits.append(index)
                if first_only:
                    break
        return hits
    text = "\n".join(lines)
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    marked: set[int] = set()
    for match in query.regex.finditer(text):
        first = bisect.bisect_right(starts, match.start()) - 1
        last = bisect.bisect_right(starts, max(match.end() - 1, match.start())) - 1
        marked.update(range(first, last + 1))
        if first_only:
            break
    return sorted(marked)


def _content_lines(
    query: GrepQuery, label: str | None, lines: list[str], hits: list[int]
) -> list[str]:
    out: list[str] = []
    hit_set = set(hits)
    previous_end = -1
    for hit in hits:
        start = max(hit - query.before, 0, previous_end + 1)
        end = min(hit + query.after, len(lines) - 1)
        if start > end:
            continue
        if out and start > previous_end + 1 and (query.before or query.after):
            out.append("--")
        for index in range(start, end + 1):
            sep = ":" if index in hit_set else "-"
            text = lines[index]
            if len(text) > GREP_LINE_CHARS:
                text = text[:GREP_LINE_CHARS] + " [...]"
            number = f"{index + 1}{sep}" if query.line_numbers else ""
            prefix = f"{label}{sep}" if label is not None else ""
            out.append(f"{prefix}{number}{text}")
        previous_end = end
    return out


def grep(query: GrepQuery, should_stop: Callable[[], bool]) -> str:
    single_file = query.root.is_file()
    window_end = query.offset + query.head_limit if query.head_limit else None
    entries: list[str] = []
    matched_files: list[tuple[float, str]] = []
    total_lines = 0
    page_chars = 0
    maybe_more = False  # stopped reading files before the last one
    for path, mtime in _candidates(query, should_stop):
        if should_stop():
            break
        lines = _load(path, query.boundary, not single_file)
        if not lines:
            continue
        hits = matching_lines(query, lines, first_only=query.mode == "files_with_matches")
        if not hits:
            continue
        if query.mode == "files_with_matches":
            matched_files.append((-mtime, str(path)))
            continue
        before = len(entries)
        if query.mode == "count":
            entries.append(f"{path}:{len(hits)}")
            total_lines += len(hits)
        else:
            if entries and (query.before or query.after):
                entries.append("--")
            entries.extend(_content_lines(query, None if single_file else str(path), lines, hits))
        page_chars += sum(len(e) + 1 for e in entries[max(before, query.offset) :])
        # Stop reading files once the requested page (or the character cap) is certainly full.
        if (window_end is not None and len(entries) >= window_end) or page_chars > GREP_OUTPUT_CAP:
            maybe_more = True
            break

    if query.mode == "files_with_matches":
        matched_files.sort()
        entries = [path for _, path in matched_files]
    if not entries:
        return NO_MATCHES
    page = entries[query.offset : window_end]
    if not page:
        return f"No results at offset {query.offset}: there are only {len(entries)} entries."
    header = ""
    if query.mode == "files_with_matches":
        header = f"Found {len(entries)} file{'s' if len(entries) != 1 else ''}"
    shown = _fit(page, GREP_OUTPUT_CAP - len(header) - 300)
    next_offset = query.offset + len(shown)
    more = maybe_more or next_offset < len(entries)
    parts = [header] if header else []
    parts.extend(shown)
    if len(shown) < len(page):
        parts.append(
            f"\n[Output capped at {GREP_OUTPUT_CAP} characters. Use offset={next_offset} to see "
            "more, or narrow the search with path, glob or type.]"
        )
    elif more:
        parts.append(
            f"\n[More results {'may ' if maybe_more else ''}exist: showing entries "
            f"{query.offset + 1}-{next_offset}. Use offset={next_offset} to see more.]"
        )
    elif query.mode == "count":
        files = len(entries)
        parts.append(
            f"\nFound {total_lines} matching line{'s' if total_lines != 1 else ''} in "
            f"{files} file{'s' if files != 1 else ''}."
        )
    return "\n".join(parts)


def _fit(entries: list[str], budget: int) -> list[str]:
    used = 0
    for index, entry in enumerate(entries):
        used += len(entry) + 1
        if used > budget:
            return entries[:index]
    return entries
