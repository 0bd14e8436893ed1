"""Every error tether raises on purpose, in one tree (below), so callers catch by meaning.

    TetherError                  anything tether reports to a user; `str()` says what and why
    ├── UsageError               bad flags, bad settings values (exit 1, message names the flag)
    ├── ProtocolError            bytes from outside that do not fit the vocabulary
    │   └── TranscriptCorrupt    a damaged line in a conversation file (names file and line)
    ├── StoreError               the local store cannot do what was asked
    │   ├── NotFound             no such agent / conversation
    │   └── ConversationBusy     another process is running a turn on the conversation
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
    def __init__(self, conversation_id: str) -> None:
        super().__init__(
            f"Conversation {conversation_id} is busy with another active run "
            "(another tether process holds its turn lock); wait for it to finish or use --new"
        )
        self.conversation_id = conversation_id


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
