"""Paths as permission rules see them: gitignore-style patterns, resolution, containment.

A file rule's pattern is matched against the path a call really touches: `..` collapsed,
symlinks followed (`resolve`), so `src/k -> ~/.ssh/id_rsa` is judged as `~/.ssh/id_rsa`. Deny
rules are matched against both the spelled and the resolved path, case- and Unicode-folded, so no
spelling of a denied file slips through; allow rules only against the resolved path.

Pattern forms (gitignore semantics, anchored to the working directory unless absolute):

    //abs/x  /abs/x       absolute
    ~/x                   under the home directory
    ./x  a/b              relative to the working directory (a slash anchors it)
    name  *.env           a bare name matches at any depth (and, for denies, anywhere on disk)
    dir  dir/**           a directory covers everything below it, and `dir/**` covers `dir`

Also here: what a shell glob expands to on disk (`expand_glob`), and which paths land in a
directory whose contents run later (`.git`, `.tether` at any depth: `arms_later`).
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

# Kernel "magic links": reading through them reaches files a path check cannot see.
_MAGIC = re.compile(r"^/(?:proc/[^/]+/(?:root|cwd|fd|fdinfo|environ|mem|map_files)|dev/fd)(?:/|$)")


@lru_cache(maxsize=8192)
def fold(text: str) -> str:
    return unicodedata.normalize("NFC", text).casefold()


@dataclass(frozen=True, slots=True)
class PathPattern:
    text: str
    anchor: str  # "abs", "home", "cwd" (anchored), "any" (bare name: any depth)
    body: str  # the glob after the anchor is stripped
    regex: re.Pattern[str]
    folded: re.Pattern[str]

    @staticmethod
    def parse(spec: str) -> PathPattern:
        text = spec.strip()
        if not text:
            raise ValueError("the path pattern is empty")
        if "\x00" in text:
            raise ValueError("the path pattern contains a NUL byte")
        if text.startswith("//"):
            anchor, body = "abs", text[2:]
        elif text.startswith("/"):
            anchor, body = "abs", text[1:]
        elif text == "~" or text.startswith("~/"):
            anchor, body = "home", text[2:]
        elif text.startswith("~"):
            raise ValueError(f"{text!r}: '~user' paths are not supported; spell the path out")
        else:
            body = text[2:] if text.startswith("./") else text
            trimmed = body.rstrip("/")
            anchor = "cwd" if ("/" in trimmed or text.startswith("./")) else "any"
        body = body.strip("/") if anchor != "any" else body.rstrip("/")
        source = _glob_to_regex(body)
        if anchor == "any":
            source = r"(?:.*/)?" + source
        source = rf"^{source}(?:/.*)?$" if body else r"^.*$"
        return PathPattern(
            text, anchor, body, re.compile(source, re.S), re.compile(fold(source), re.S)
        )

    def matches(self, path: Path, *, cwd: Path, home: Path, deny: bool) -> bool:
        """Whether absolute `path` is covered; `deny` folds case and lets bare names match
        anywhere on disk."""
        regex = self.folded if deny else self.regex
        if self.anchor == "abs":
            return _search(regex, str(path).lstrip("/"), deny)
        base = home if self.anchor == "home" else cwd
        rel = _relative(path, base)
        if rel is not None and _search(regex, rel, deny):
            return True
        return self.anchor == "any" and deny and _search(regex, str(path).lstrip("/"), deny)


def _search(regex: re.Pattern[str], text: str, deny: bool) -> bool:
    return regex.match(fold(text) if deny else text) is not None


def _relative(path: Path, base: Path) -> str | None:
    # String prefixes on normalised absolute paths: pathlib's relative_to is the hot spot here.
    p, b = str(path), str(base)
    if p == b:
        return ""
    if b == "/":
        return p[1:]
    return p[len(b) + 1 :] if p.startswith(b) and p[len(b)] == "/" else None


def _glob_to_regex(glob: str) -> str:
    out: list[str] = []
    i, n = 0, len(glob)
    while i < n:
        ch = glob[i]
        if ch == "*":
            if glob.startswith("**", i):
                at_start = i == 0 or glob[i - 1] == "/"
                after = glob[i + 2 : i + 3]
                if at_start and after == "/":
                    out.append(r"(?:.*/)?")
                    i += 3
                    continue
                if at_start and after == "":
                    out.append(r".*")
                    i += 2
                    continue
                out.append(r"[^/]*")
                i += 2
                continue
            out.append(r"[^/]*")
        elif ch == "?":
            out.append(r"[^/]")
        elif ch == "[":
            end = glob.find("]", i + 2 if glob[i + 1 : i + 2] in ("!", "^") else i + 1)
            if end == -1:
                out.append(re.escape(ch))
            else:
                inner = glob[i + 1 : end]
                if inner[:1] in ("!", "^"):
                    inner = "^" + inner[1:]
                out.append("[" + inner.replace("\\", "\\\\") + "]")
                i = end
        elif ch == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(glob[i]))
        else:
            out.append(re.escape(ch))
        i += 1
    # "dir/**" also covers "dir" itself: the trailing "/.*" is optional.
    source = "".join(out)
    if source.endswith("/.*"):
        source = source[:-3]
    return source


@dataclass(frozen=True, slots=True)
class PathRef:
    """One path a call touches: as spelled (absolute, `..` collapsed) and as resolved."""

    spelled: Path
    resolved: Path

    @property
    def forms(self) -> tuple[Path, ...]:
        return (self.spelled,) if self.spelled == self.resolved else (self.spelled, self.resolved)


def resolve_path(raw: str | os.PathLike[str], cwd: Path, home: Path) -> PathRef:
    """Absolute, normalised and symlink-resolved forms of `raw` (relative to `cwd`, `~` = home)."""
    text = os.fspath(raw)
    if text == "~" or text.startswith("~/"):
        text = str(home) + text[1:]
    spelled = Path(os.path.normpath(os.path.join(cwd, text)))
    # realpath resolves through "..": "link/../x" is judged where the kernel would open it.
    resolved = Path(os.path.realpath(os.path.join(cwd, text)))
    return PathRef(spelled, resolved)


def hard_linked(path: Path) -> bool:
    """Whether `path` is a regular file with other names (`st_nlink > 1`). Another name may sit
    outside the workspace, under a deny rule or in a folder the sandbox hides, where neither the
    path rules nor the kernel's mounts see it: a read or an in-place write through this name
    reaches that file (catalogue b7)."""
    import stat

    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return False
    return stat.S_ISREG(info.st_mode) and info.st_nlink > 1


def within(path: Path, roots: Sequence[Path]) -> bool:
    """Component-wise containment: `/proj_evil/x` is not inside `/proj`."""
    return any(_relative(path, root) is not None for root in roots)


def magic_link(ref: PathRef) -> bool:
    """True when the path goes through /proc/<pid>/{root,cwd,fd,environ,mem} or /dev/fd."""
    return any(_MAGIC.match(str(p)) for p in ref.forms)


# Directories whose contents run later without asking: git hooks and config, tether's settings.
ARMING_NAMES = (".git", ".tether")


def arms_later(ref: PathRef, roots: Sequence[Path]) -> str | None:
    """The `.git` or `.tether` directory (at any depth below a workspace root) a write to `ref`
    would land in, or None. Outside the roots a write asks anyway."""
    for form in ref.forms:
        for root in roots:
            rel = _relative(form, root)
            if not rel:
                continue
            parts = rel.split("/")
            for index, part in enumerate(parts):
                if fold(part) in ARMING_NAMES:
                    return str(root.joinpath(*parts[: index + 1]))
    return None


def names_arming_dir(pattern: PathPattern) -> bool:
    """Whether an allow rule's pattern spells out a `.git` or `.tether` directory."""
    return any(fold(part) in ARMING_NAMES for part in pattern.body.split("/"))


def expand_glob(pattern: str, cwd: Path, limit: int = 5000) -> list[str] | None:
    """What bash's pathname expansion of `pattern` yields in `cwd` (dotfiles only for a pattern
    starting with a dot, as bash without `dotglob`); None past `limit` matches."""
    import glob

    out: list[str] = []
    for match in glob.iglob(pattern, root_dir=cwd):
        out.append(match)
        if len(out) > limit:
            return None
    return sorted(out)
