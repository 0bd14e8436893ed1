"""Race-free file access for the file tools: what they open is what was checked.

Reads open with `O_NONBLOCK` after a `stat` says "regular file" and `fstat` confirms it on the
descriptor, so a FIFO, socket or device is refused, never read (and never waited on); the real
path of the descriptor (`/proc/self/fd/N`) is then held to the `ReadBoundary`.

Writes and the reads of Edit/MultiEdit never follow a symlink that appears after the target was
resolved: the target's directory is opened with `openat2(RESOLVE_NO_SYMLINKS)` (see `openat2`),
or where that is missing by walking down from `/` one component at a time with
`O_NOFOLLOW|O_DIRECTORY` (creating missing ones with `mkdirat`), the file is opened
`O_NOFOLLOW` inside that descriptor, and a write goes to a temp file made there with
`O_EXCL|O_NOFOLLOW` and renamed over the name — a rename replaces a symlink, it never writes
through one. A symlink already in place when the call starts is followed only if it stays inside
the workspace and out of `.git`/`.tether`; one that leads out of it (`src/new -> ~/.bashrc`)
or into repository metadata (`notes -> .git/hooks/pre-commit`) is refused.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from tether.core.tools import ToolRunContext
from tether.errors import ToolFailure
from tether.tools.boundary import ReadBoundary, boundary_for

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_NOCTTY = getattr(os, "O_NOCTTY", 0)
_READ_FLAGS = os.O_RDONLY | _NONBLOCK | _NOCTTY | _CLOEXEC
_DIR_FLAGS = os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC


def describe_kind(mode: int) -> str | None:
    """What a non-regular, non-directory file is, in words; None for regular files and dirs."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISLNK(mode):
        return "a symlink"
    return "not a regular file"


def fd_real_path(fd: int) -> str | None:
    """The path the kernel has for an open descriptor (Linux); None where /proc cannot say."""
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    return real if real.startswith("/") else None


def _not_regular(path: Path | str, kind: str, tool: str) -> ToolFailure:
    return ToolFailure(
        f"{tool} refused: {path} is {kind}, not a regular file; reading it could block or never "
        "end. Only regular files are read."
    )


def open_regular(
    path: Path | str, *, tool: str, boundary: ReadBoundary | None, known_regular: bool = False,
    judged: tuple[str, ...] = (),
) -> int:
    """A read-only descriptor of the regular file at `path` (symlinks followed), checked.

    Raises FileNotFoundError / IsADirectoryError for the caller to word, and ToolFailure for a
    FIFO, socket or device, an unreadable file, or one the boundary hides. `known_regular`
    (a walk just saw a regular file) skips the stat before the open; the checks on the open
    descriptor still run.
    """
    spelled = os.fspath(path)
    if not known_regular:
        try:
            info = os.stat(spelled)  # before opening: opening some devices already does something
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise ToolFailure(f"Could not read {spelled}: {exc.strerror or exc}") from exc
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", spelled)
        kind = describe_kind(info.st_mode)
        if kind is not None:
            raise _not_regular(spelled, kind, tool)
    try:
        fd = os.open(spelled, _READ_FLAGS)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ToolFailure(f"Could not read {spelled}: {exc.strerror or exc}") from exc
    try:
        # The name may have been swapped since the stat: judge what was opened.
        opened = os.fstat(fd)
        mode = opened.st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(spelled, describe_kind(mode) or "a directory", tool)
        if boundary is not None or judged:
            real = fd_real_path(fd) or os.path.realpath(spelled)
            if judged and real not in judged:  # swapped for a link since the decision saw it
                raise ToolFailure(
                    f"{tool} refused: {spelled} now leads to {real}, not to the file that was "
                    "approved; read that path by its own name if you need it")
            refusal = boundary.refusal(tool, spelled, real) if boundary is not None else None
            if refusal is None and boundary is not None:
                refusal = boundary.alias_refusal(tool, spelled, opened, real)
            if refusal is not None:
                raise ToolFailure(refusal)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_fd(fd: int, limit: int | None = None) -> bytes:
    """Up to `limit` bytes (all when None) from the descriptor's current offset."""
    chunks: list[bytes] = []
    left = limit
    while left is None or left > 0:
        chunk = os.read(fd, 1 << 20 if left is None else min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        if left is not None:
            left -= len(chunk)
    return b"".join(chunks)


class PathChanged(ToolFailure):
    """A directory or file turned into a symlink (or vanished) while a tool was using it."""


def _changed(real_dir: str, exc: OSError) -> PathChanged:
    return PathChanged(
        f"{real_dir} changed while it was being opened (a part of it is now a symlink); "
        "nothing was changed. Check the path and try again."
    )


def open_directory(real_dir: str, *, create: bool) -> int:
    """A descriptor of the directory `real_dir` (a real path: no symlinks in it) opened so that
    no symlink can redirect it: `openat2` with RESOLVE_NO_SYMLINKS where the kernel has it, else
    a walk from `/` with O_NOFOLLOW at every step. Missing directories are created when
    `create` (by the walk, with `mkdirat` in the verified parent)."""
    from tether.tools.openat2 import open_dir_no_symlinks

    try:
        fd = open_dir_no_symlinks(real_dir, _DIR_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _changed(real_dir, exc) from exc
        # ENOTDIR: a file, or (O_NOFOLLOW) a symlink as the last part; the walk tells which.
        if exc.errno != errno.ENOTDIR and not (create and exc.errno == errno.ENOENT):
            raise
        fd = None
    if fd is not None:
        return fd
    parts = [p for p in real_dir.split("/") if p]
    fd = os.open("/", _DIR_FLAGS)
    try:
        for part in parts:
            try:
                child = _open_child_dir(fd, part, create)
            except OSError as exc:
                if exc.errno == errno.ELOOP or (
                    exc.errno == errno.ENOTDIR and _is_symlink(fd, part)
                ):
                    raise _changed(real_dir, exc) from exc
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_child_dir(fd: int, part: str, create: bool) -> int:
    try:
        return os.open(part, _DIR_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        if not create:
            raise
    with contextlib.suppress(FileExistsError):
        os.mkdir(part, 0o777, dir_fd=fd)
    return os.open(part, _DIR_FLAGS, dir_fd=fd)


def _is_symlink(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


# Folders whose files a later step runs or loads (git hooks and config, tether's project
# settings): a link swapped in after the permission check must not steer a write there.
ARMED_NAMES = frozenset({".git", ".tether"})


def _armed_dir(real: tuple[str, str], spelled: tuple[str, str]) -> str | None:
    """The `.git`/`.tether` folder the real path lies in when the spelled one named none; each
    path is (workspace root, rest), and only the rest is looked at."""
    if ARMED_NAMES.intersection(spelled[1].split("/")):
        return None  # named outright: the permission layer judged that path itself
    root, rest = real
    parts = rest.split("/")
    for index, part in enumerate(parts):
        if part in ARMED_NAMES:
            return root + "/".join(parts[: index + 1])
    return None


def _split(real: str) -> tuple[str, str]:
    parent, _, name = real.rpartition("/")
    return parent or "/", name


class FileAccess:
    """One tool call's file access: what it may reach and where the workspace is."""

    __slots__ = ("boundary", "workspace")  # a plain class: no dataclass cost at start-up

    def __init__(self, boundary: ReadBoundary, workspace: tuple[str, ...]) -> None:
        self.boundary = boundary
        self.workspace = workspace  # the cwd and the sandbox's writable roots, spelled and real

    @staticmethod
    def of(ctx: ToolRunContext) -> FileAccess:
        roots: list[Path] = [ctx.cwd]
        policy = getattr(ctx.services.sandbox, "policy", None)
        roots.extend(getattr(policy, "writable_roots", ()))
        forms: dict[str, None] = {}
        for root in roots:
            forms[os.path.normpath(os.path.abspath(root))] = None
            forms[os.path.realpath(root)] = None
        return FileAccess(boundary_for(ctx), tuple(forms))

    def _inside(self, path: str) -> bool:
        return any(path == r or path.startswith(r.rstrip("/") + "/") for r in self.workspace)

    def _below_root(self, path: str) -> tuple[str, str]:
        """(the deepest workspace root holding `path`, the rest), or ("", path) outside them:
        names in the root's own path (a workspace under ~/.tether) are not the path's."""
        best = ""
        for root in self.workspace:
            prefix = root.rstrip("/")
            if (path == root or path.startswith(prefix + "/")) and len(prefix) > len(best):
                best = prefix
        return best, path[len(best) :]

    def target(self, path: Path, tool: str) -> str:
        """The real path `tool` may change for `path`: symlinks followed only while they stay in
        the workspace, and never into what the boundary hides."""
        spelled = os.path.normpath(os.path.abspath(path))
        real = os.path.realpath(spelled)
        if real != spelled and self._inside(spelled) and not self._inside(real):
            raise ToolFailure(
                f"{tool} refused: {path} leads out of the workspace through a symlink (to "
                f"{real}). File tools do not write through such links; give the real path if "
                "you mean that file."
            )
        if real != spelled:
            armed = _armed_dir(self._below_root(real), self._below_root(spelled))
            if armed is not None:
                raise ToolFailure(
                    f"{tool} refused: {path} leads into {armed} through a symlink. Repository "
                    "metadata and tether's project settings are not written through links."
                )
        refusal = self.boundary.refusal(tool, path, real)
        if refusal is not None:
            raise ToolFailure(refusal)
        return real

    def read_bytes(self, path: Path, tool: str) -> bytes:
        """The content of the file `tool` will rewrite, read without following a new symlink.

        Raises FileNotFoundError when it does not exist, IsADirectoryError, or ToolFailure."""
        real = self.target(path, tool)
        parent, name = _split(real)
        dir_fd = open_directory(parent, create=False)
        try:
            # Looked at before opening: opening a device or socket already does something.
            mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
            kind = None if stat.S_ISLNK(mode) else describe_kind(mode)
            if kind is not None:
                raise _not_regular(path, kind, tool)
            try:
                fd = os.open(name, _READ_FLAGS | _NOFOLLOW, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise PathChanged(
                        f"{path} turned into a symlink while {tool} was reading it; nothing was "
                        "changed."
                    ) from exc
                raise
        finally:
            os.close(dir_fd)
        try:
            opened = os.fstat(fd)
            mode = opened.st_mode
            if stat.S_ISDIR(mode):
                raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
            kind = describe_kind(mode)
            if kind is not None:
                raise _not_regular(path, kind, tool)
            refusal = self.boundary.alias_refusal(tool, path, opened, real)
            if refusal is not None:
                raise ToolFailure(refusal)
            return read_fd(fd)
        finally:
            os.close(fd)

    def write_bytes(self, path: Path, data: bytes, tool: str, *, default_mode: int) -> bool:
        """Replace the file's content atomically; True when it was created.

        The temp file is made in the directory's verified descriptor and renamed over the name,
        so a symlink swapped in meanwhile is replaced, and whatever it pointed at is untouched.
        """
        real = self.target(path, tool)
        parent, name = _split(real)
        if not name:
            raise ToolFailure(f"{path} is a directory; give a file path to write to.")
        dir_fd = open_directory(parent, create=True)
        try:
            expected = fd_real_path(dir_fd)
            if expected is not None and expected != parent:
                raise PathChanged(f"{parent} moved while {tool} was writing; nothing was written.")
            try:
                info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                mode, created = default_mode, True
            else:
                if stat.S_ISDIR(info.st_mode):
                    raise ToolFailure(f"{path} is a directory; give a file path to write to.")
                if stat.S_ISLNK(info.st_mode):
                    raise PathChanged(
                        f"{path} turned into a symlink while {tool} was writing; nothing was "
                        "written."
                    )
                kind = describe_kind(info.st_mode)
                if kind is not None:
                    raise ToolFailure(f"{tool} refused: {path} is {kind}, not a regular file.")
                refusal = self.boundary.alias_refusal(tool, path, info, real)
                if refusal is not None:
                    raise ToolFailure(refusal)
                mode, created = stat.S_IMODE(info.st_mode), False
            _replace_in(dir_fd, name, data, mode)
        finally:
            os.close(dir_fd)
        return created


def _replace_in(dir_fd: int, name: str, data: bytes, mode: int) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
    while True:
        temp = f".{name[:200]}.{os.urandom(4).hex()}.tmp"
        try:
            fd = os.open(temp, flags, 0o600, dir_fd=dir_fd)
            break
        except FileExistsError:
            continue
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
    with contextlib.suppress(OSError):
        os.fsync(dir_fd)  # the rename itself is durable
