"""Stored provider credentials: `<TETHER_HOME>/providers/auth.json` (0600, written atomically).

Records keep the reference's shape (§5) so a file written by one tool reads in the other.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from tether.errors import UsageError
from tether.protocol.chunks import iso_now
from tether.providers.timeouts import parse_timeout

# handle prefix -> record name; `llama-cpp` is an alias of `llama.cpp`.
RECORD_NAMES = {
    "anthropic": "lc-anthropic",
    "openai": "lc-openai",
    "openai-chat": "lc-openai-chat",
    "openai-compatible": "lc-openai-compatible",
    "ollama": "lc-ollama",
    "lmstudio": "lc-lmstudio",
    "llama.cpp": "lc-llama-cpp",
    "llama-cpp": "lc-llama-cpp",
}
LOCAL_KEY = "not-needed"
_KEYLESS = frozenset({"openai-compatible", "ollama", "lmstudio", "llama.cpp", "llama-cpp"})


def auth_path(home: Path) -> Path:
    return home / "providers" / "auth.json"


def load_credentials(home: Path) -> list[dict[str, Any]]:
    """Every stored record; no file means none. A damaged file is an error naming it."""
    path = auth_path(home)
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    try:
        data = json.loads(raw) if raw.strip() else []
    except ValueError as exc:
        raise UsageError(
            f"{path} is not valid JSON ({exc}); fix it, or delete it and run `tether connect` again"
        ) from None
    records = data.get("providers") if isinstance(data, dict) else data
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise UsageError(
            f"{path} must hold a JSON list of provider records; fix it, or delete it and run "
            "`tether connect` again"
        )
    return records


def find_credential(records: list[dict[str, Any]], provider: str) -> dict[str, Any] | None:
    name = RECORD_NAMES.get(provider)
    return next((r for r in records if r.get("name") == name), None) if name else None


def record_key(record: dict[str, Any] | None) -> str | None:
    auth = record.get("auth") if record else None
    key = auth.get("key") if isinstance(auth, dict) else None
    return key if isinstance(key, str) and key else None


def save_credential(
    home: Path,
    provider: str,
    *,
    api_key: str | None,
    base_url: str | None,
    timeout: str | None,
) -> dict[str, Any]:
    """Create or update the record for `provider` (a handle prefix); returns the stored record.

    None keeps what an existing record has; a new hosted record needs an API key.
    """
    name = RECORD_NAMES.get(provider)
    if name is None:
        raise UsageError(
            f"unknown provider {provider!r}; choose one of: {', '.join(sorted(set(RECORD_NAMES) - {'llama-cpp'}))}"
        )
    canonical = "llama.cpp" if provider == "llama-cpp" else provider
    if base_url is not None and not base_url.startswith(("http://", "https://")):
        raise UsageError(f"--base-url {base_url!r} must start with http:// or https://")
    if timeout is not None:
        parse_timeout(timeout, "--timeout")  # reject a bad value now, not at the first call
    records = load_credentials(home)
    old = find_credential(records, canonical) or {}
    key = api_key or record_key(old) or (LOCAL_KEY if canonical in _KEYLESS else None)
    if key is None:
        raise UsageError(f"tether connect {canonical} needs an API key: pass --api-key KEY")
    now = iso_now()
    record: dict[str, Any] = {
        "id": f"local-provider-{name}",
        "name": name,
        "provider_type": canonical,
        "provider_category": "byok",
        "auth": {"type": "api", "key": key},
        "created_at": old.get("created_at", now),
        "updated_at": now,
    }
    for field, value in (("base_url", base_url), ("timeout", timeout)):
        if value is not None:
            record[field] = value.rstrip("/") if field == "base_url" else value
        elif field in old:
            record[field] = old[field]
    records = [r for r in records if r.get("name") != name] + [record]
    _write_private(auth_path(home), json.dumps(records, indent=2) + "\n")
    return record


def remove_credential(home: Path, provider: str) -> bool:
    """Forget the record for `provider`; False when there was none."""
    name = RECORD_NAMES.get(provider)
    records = load_credentials(home)
    kept = [r for r in records if r.get("name") != name]
    if len(kept) == len(records):
        return False
    _write_private(auth_path(home), json.dumps(kept, indent=2) + "\n")
    return True


def _write_private(path: Path, text: str) -> None:
    """Temp file (0600 from birth) + fsync + os.replace: a reader sees the old or the new file."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)  # mkdir's mode is masked by umask and ignored if it existed
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".auth-", suffix=".tmp")  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
