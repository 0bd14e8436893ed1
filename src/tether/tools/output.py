"""What built-in tools hand back to the model: ANSI-free, secret-scrubbed, capped text.

Shell output is the one place arbitrary bytes from programs reach the model, so it goes through
`clean_program_output` (escape sequences out, credential values out) and `cap_with_overflow`
(the model sees head and tail, the full text stays on disk in a 0600 file it can Read).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from tether.core.tools import ToolResult

SHELL_OUTPUT_CAP = 30_000
REDACTED = "[redacted]"
SECRET_NAME_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
# Whole `_`-separated words of a name that mean a credential (`MYSQL_PWD`, `GITLAB_PAT`,
# `NPM_CONFIG__AUTH`) without matching `GIT_AUTHOR_NAME` or the working directory's `PWD`.
SECRET_NAME_WORDS = frozenset(
    {"PAT", "AUTH", "PWD", "PASS", "PASSPHRASE", "COOKIE", "AUTHORIZATION", "DSN", "APIKEY"}
)
_NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD"})
MIN_SECRET_LENGTH = 8

# Values that are credentials whatever their variable is called: a URL carrying a password
# (DATABASE_URL, https_proxy=http://u:p@proxy), provider tokens by their documented prefixes,
# AWS access key ids, JWTs, PEM private keys.
_SECRET_VALUE = re.compile(
    r"[A-Za-z][A-Za-z0-9+.-]*://[^/@\s:]*:[^/@\s]+@"
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}"
    r"|\bgithub_pat_[A-Za-z0-9_]{20,}"
    r"|\bglpat-[A-Za-z0-9_-]{16,}"
    r"|\bsk-[A-Za-z0-9_-]{16,}"
    r"|\bxox[abposr]-[A-Za-z0-9-]{10,}"
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"
    r"|\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+"
    r"|\bnpm_[A-Za-z0-9]{30,}"
    r"|\bpypi-[A-Za-z0-9_-]{30,}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
)

# CSI (colours, cursor moves), OSC (titles, hyperlinks; BEL- or ST-terminated), DCS/PM/APC
# strings, then every other escape (`ESC ( B`, `ESC =`, `ESC M`, ...). Order matters: the generic
# form would eat the first byte of the others.
_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"
    r"|\x1b[ -/]*[0-~]"
    r"|\x9b[0-?]*[ -/]*[@-~]"
)


def error_result(message: str) -> ToolResult:
    return ToolResult(message, is_error=True)


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def is_credential_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a credential (`*KEY*`, `*TOKEN*`,
    a `_PAT`/`_AUTH`/`_PWD` word …)."""
    upper = name.upper()
    if upper in _NOT_SECRET_NAMES:
        return False
    if any(marker in upper for marker in SECRET_NAME_MARKERS):
        return True
    return any(word in SECRET_NAME_WORDS for word in upper.split("_"))


def is_credential_value(value: str) -> bool:
    """Whether a value is shaped like a credential (URL with a password, `ghp_…`, `sk-…`,
    `xox…-`, an AWS key id, a JWT, a PEM private key), whatever the variable is called."""
    return _SECRET_VALUE.search(value) is not None


def is_credential(name: str, value: str) -> bool:
    """A variable a sandboxed command must not get: by its name or by its value's shape."""
    return is_credential_name(name) or is_credential_value(value)


def secret_values(env: Mapping[str, str]) -> list[str]:
    """Values of credential-looking variables and of the agent's secrets (the names
    `TETHER_SECRET_NAMES` lists), longest first so overlapping secrets redact fully."""
    named = set(env.get("TETHER_SECRET_NAMES", "").split(","))
    found = {
        value
        for name, value in env.items()
        if (is_credential(name, value) or name in named) and len(value) >= MIN_SECRET_LENGTH
    }
    return sorted(found, key=len, reverse=True)


def scrub_secrets(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def clean_program_output(text: str, secrets: Iterable[str]) -> str:
    """Program output as the model should see it: no escape sequences, no credential values."""
    text = text.replace("\r\n", "\n")
    return scrub_secrets(strip_ansi(text), secrets)


def write_private_file(directory: Path | None, prefix: str, text: str) -> Path:
    """Write `text` to a new 0600 file in `directory` (or the system temp dir) and return it."""
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        # The file is created O_EXCL (never through a link); the directory must not be a
        # symlink either, or a planted link would decide where tether writes.
        if os.path.islink(directory):
            raise OSError(f"{directory} is a symlink, not a directory tether may write into")
    fd, name = tempfile.mkstemp(
        prefix=prefix, suffix=".txt", dir=os.fspath(directory) if directory else None
    )
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    return Path(name)


def cap_with_overflow(
    text: str, *, limit: int = SHELL_OUTPUT_CAP, overflow_dir: Path | None, prefix: str
) -> str:
    """`text` if it fits, else its head and tail around a note naming the file holding all of it.

    Head and tail both matter: commands print what they are doing first and fail last.
    """
    if len(text) <= limit:
        return text
    try:
        saved = write_private_file(overflow_dir, prefix, text)
        where = (
            f"the full output is saved to {saved}; read it with Read (offset/limit) or search "
            "it with Grep"
        )
    except OSError as exc:
        where = f"the full output could not be saved ({exc.strerror or exc})"
    note = (
        f"\n\n... [output truncated: {len(text):,} characters in total, showing the first and "
        f"last part; {where}] ...\n\n"
    )
    budget = max(limit - len(note), 0)
    head = budget // 2
    tail = budget - head
    return text[:head] + note + (text[-tail:] if tail else "")


def cap_text(text: str, limit: int, hint: str) -> str:
    """Cut `text` at the last line break before `limit` chars and say how to see the rest."""
    if len(text) <= limit:
        return text
    note = f"\n\n[Output truncated at {limit:,} characters. {hint}]"
    keep = text[: max(limit - len(note), 0)]
    cut = keep.rfind("\n")
    if cut > 0:
        keep = keep[:cut]
    return keep + note
