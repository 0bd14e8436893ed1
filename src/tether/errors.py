"""Every error tether raises on purpose, in one tree (below), so callers catch by meaning.

    TetherError                  anything tether reports to a user; `str()` says what and why
    ├── UsageError               bad flags, bad settings values (exit 1, message names the flag)
    ├── ProtocolError            bytes from outside that do not fit the vocabulary
    │   └── TranscriptCorrupt    a damaged line in a conversation file (names file and line)
    ├── StoreError               the local store cannot do what was asked
    │   ├── NotFound             no such agent / conversation
    │   ├── ConversationBusy     another process is running a turn on the conversation
    │   └── StoreUnwritable      tether's own files cannot be written (read-only, I/O error);
    │       │                    an OSError too, naming the path and the cause
    │       └── DiskFull         the disk (or quota) under any store is full: names the file,
    │                            the file system's mount point and the space left
    ├── ProviderError            a model provider failed; `retryable` says whether to try again
    │   ├── ProviderHTTPError    a non-2xx answer (carries status and Retry-After)
    │   ├── StreamCut            the stream ended before its final event
    │   └── ProviderTimeout      no answer within the configured timeout
    ├── SandboxError             the kernel sandbox cannot be built or would not protect; nothing ran
    └── ToolFailure              a tool ran and failed; the message goes to the model as the result

It lives at the package root, beside nothing, so every layer (protocol included) can raise it.
"""

from __future__ import annotations


class TetherError(Exception):
    """Base of every deliberate tether error."""


class UsageError(TetherError):
    """The user asked for something malformed (flag, setting, argument)."""


class ProtocolError(TetherError):
    """Input from outside the process does not match the expected shape."""


class TranscriptCorrupt(ProtocolError):
    def __init__(self, path: str, line: int, why: str) -> None:
        super().__init__(
            f"{path}:{line}: conversation transcript is damaged ({why}); "
            "tether will not guess past it: repair or move the file"
        )
        self.path = path
        self.line = line


class StoreError(TetherError):
    """The local store cannot satisfy a request."""


class NotFound(StoreError):
    pass


class ConversationBusy(StoreError):
    def __init__(self, conversation_id: str, message: str | None = None) -> None:
        super().__init__(
            message or f"Conversation {conversation_id} is busy with another active run "
            "(another tether process holds its turn lock); wait for it to finish or use --new"
        )
        self.conversation_id = conversation_id


class ReplyTaken(StoreError):
    """A channel reply whose tool call id a gateway (this one or another sharing the journal)
    already began sending: refused, so the platform never gets it twice."""


class StoreUnwritable(StoreError, OSError):
    """tether's own files cannot be written (a full disk, a read-only TETHER_HOME, an I/O
    error). The message names the path and the cause. It is an OSError too, so code that
    already tolerates a failed write keeps tolerating it."""

    def __init__(self, message: str, code: int, path: str) -> None:
        super().__init__(message)
        self.message = message
        self.errno = code
        self.filename = path

    def __str__(self) -> str:  # not OSError's "[Errno N] …" rendering
        return self.message


class DiskFull(StoreUnwritable):
    """A write to one of tether's stores failed because its disk is full (ENOSPC), its quota is
    used up (EDQUOT), or SQLite says so (SQLITE_FULL, or an I/O error on a disk with next to no
    space left). Every store reports it so: the file, the disk (its mount point), the space
    left there, and what to do. `consequence` says what the failure means for the run."""

    def __init__(
        self,
        path: str,
        *,
        doing: str,
        cause: str,
        code: int,
        mount: str | None = None,
        free_bytes: int | None = None,
        inodes_left: bool = True,
        quota: bool = False,
        consequence: str = "",
    ) -> None:
        what = "the disk quota is used up" if quota else "the disk is full"
        if not inodes_left:
            room = f"no free inodes on {mount}"
        elif free_bytes is not None:
            room = f"{format_bytes(free_bytes)} free on {mount}"
        else:
            room = ""
        detail = f"{cause}; {room}" if room else cause
        then = f"; {consequence}" if consequence else ""
        super().__init__(
            f"{what}: cannot {doing} {path} ({detail}){then}; free some space on "
            f"{mount or 'that disk'}, or point TETHER_HOME at another disk",
            code,
            path,
        )
        self.path = path
        self.mount = mount
        self.free_bytes = free_bytes


def format_bytes(n: int) -> str:
    """`n` bytes for a person: `0 bytes`, `512 bytes`, `12.0 KiB`, `3.5 MiB`."""
    if n < 1024:
        return f"{n} byte{'' if n == 1 else 's'}"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            break
    return f"{size:.1f} {unit}"


class ProviderError(TetherError):
    """A model provider failed. `error_type` and `detail` follow the reference's error chunk."""

    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        detail: str = "",
        retryable: bool | None = None,
        error_type: str = "llm_error",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.error_type = error_type
        if retryable is not None:
            self.retryable = retryable


class ProviderHTTPError(ProviderError):
    def __init__(
        self, status: int, message: str, *, detail: str = "", retry_after_s: float | None = None
    ) -> None:
        super().__init__(
            message, detail=detail, retryable=status == 429 or status >= 500 or status == 408
        )
        self.status = status
        self.retry_after_s = retry_after_s


class StreamCut(ProviderError):
    retryable = True


class ProviderTimeout(ProviderError):
    retryable = True


class ToolFailure(TetherError):
    """A tool failed in a way the model should read (becomes an error tool result)."""


class SandboxError(TetherError):
    """The sandbox cannot be built or would not protect what it promises; nothing was run."""
