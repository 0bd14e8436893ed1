"""Stored provider credentials: `<TETHER_HOME>/providers/auth.json` (0600, written atomically).

Records keep the reference's shape (§5) so a file written by one tool reads in the other.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from tether.errors import UsageError
from tether.protocol.chunks import iso_now
from tether.providers.timeouts import parse_timeout

# handle prefix -> record name (the reference's names, so one auth.json serves both tools).
RECORD_NAMES = {
    "anthropic": "lc-anthropic",
    "openai": "lc-openai",
    "openai-chat": "lc-openai-chat",
    "openai-compatible": "lc-openai-compatible",
    "ollama": "lc-ollama",
    "lmstudio": "lc-lmstudio",
    "llama.cpp": "lc-llama-cpp",
    "google": "lc-gemini",
    "bedrock": "lc-bedrock",
    "openrouter": "lc-openrouter",
    "groq": "lc-groq",
    "deepseek": "lc-deepseek",
    "together": "lc-together",
    "zai": "lc-zai",
    "mistral": "lc-mistral",
}
# Other spellings of a prefix (the reference's pi-ai aliases).
PREFIX_ALIASES = {"llama-cpp": "llama.cpp", "google_ai": "google", "amazon-bedrock": "bedrock"}
LOCAL_KEY = "not-needed"
_KEYLESS = frozenset({"openai-compatible", "ollama", "lmstudio", "llama.cpp"})
# A custom OpenAI-compatible provider's name becomes a handle prefix: keep it one path word.
_CUSTOM_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")


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


def canonical_prefix(provider: str) -> str:
    return PREFIX_ALIASES.get(provider, provider)


def find_credential(records: list[dict[str, Any]], provider: str) -> dict[str, Any] | None:
    name = RECORD_NAMES.get(canonical_prefix(provider))
    return next((r for r in records if r.get("name") == name), None) if name else None


def find_custom(records: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    """The custom OpenAI-compatible provider stored under `name` (`tether connect NAME --base-url`)."""
    return next(
        (
            r
            for r in records
            if r.get("name") == name
            and r.get("provider_type") == "openai-compatible"
            and isinstance(r.get("base_url"), str)
        ),
        None,
    )


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
    access_key: str | None = None,
    region: str | None = None,
    profile: str | None = None,
) -> dict[str, Any]:
    """Create or update the record for `provider` (a handle prefix); returns the stored record.

    None keeps what an existing record has; a new hosted record needs an API key. Bedrock keeps
    the reference's fields: `access_key` plus the secret as `auth.key`, or a `profile`, and a
    `region`.
    """
    canonical = canonical_prefix(provider)
    name = RECORD_NAMES.get(canonical)
    if name is None:
        raise UsageError(
            f"unknown provider {provider!r}; choose one of: {', '.join(sorted(RECORD_NAMES))}"
        )
    _check_base_url(base_url)
    if timeout is not None:
        parse_timeout(timeout, "--timeout")  # reject a bad value now, not at the first call
    if canonical != "bedrock" and (access_key or region or profile):
        raise UsageError("--access-key, --region and --profile are for `tether connect bedrock`")
    records = load_credentials(home)
    old = find_credential(records, canonical) or {}
    key = api_key or record_key(old) or (LOCAL_KEY if canonical in _KEYLESS else None)
    if canonical == "bedrock":
        key = _bedrock_secret(old, api_key, access_key, profile)
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
    fields = {"base_url": base_url, "timeout": timeout, "access_key": access_key}
    fields |= {"region": region, "profile": profile}
    for field, value in fields.items():
        if value is not None:
            record[field] = value.rstrip("/") if field == "base_url" else value
        elif field in old:
            record[field] = old[field]
    if canonical == "bedrock" and profile is not None and access_key is None:
        record.pop("access_key", None)  # a profile replaces stored keys rather than mixing
    records = [r for r in records if r.get("name") != name] + [record]
    _write_private(auth_path(home), json.dumps(records, indent=2) + "\n")
    return record


def _check_base_url(base_url: str | None) -> None:
    if base_url is not None and not base_url.startswith(("http://", "https://")):
        raise UsageError(f"--base-url {base_url!r} must start with http:// or https://")


def _bedrock_secret(
    old: dict[str, Any], secret: str | None, access_key: str | None, profile: str | None
) -> str | None:
    """Bedrock's `auth.key`: the secret access key, or "profile" when a profile signs instead."""
    if access_key is not None and not secret:
        raise UsageError("tether connect bedrock --access-key needs --secret-key as well")
    if secret and not (access_key or old.get("access_key")):
        raise UsageError("tether connect bedrock --secret-key needs --access-key as well")
    if secret:
        return secret
    if profile is not None:
        return "profile"
    if record_key(old):
        return record_key(old)
    raise UsageError(
        "tether connect bedrock needs --access-key and --secret-key, or --profile NAME "
        "(a profile from ~/.aws/credentials or ~/.aws/config)"
    )


def save_custom_provider(
    home: Path, name: str, *, base_url: str | None, api_key: str | None, timeout: str | None
) -> dict[str, Any]:
    """Add or update a named OpenAI-compatible provider; `NAME/<model>` then reaches it."""
    if canonical_prefix(name) in RECORD_NAMES or not _CUSTOM_NAME.fullmatch(name):
        raise UsageError(
            f"--name {name!r} cannot name a custom provider: use lower-case letters, digits, "
            "'.', '_' or '-', and not a built-in provider's name"
        )
    _check_base_url(base_url)
    if timeout is not None:
        parse_timeout(timeout, "--timeout")
    records = load_credentials(home)
    if any(r.get("name") == name for r in records) and find_custom(records, name) is None:
        raise UsageError(f"{auth_path(home)} already has a record named {name!r} of another kind")
    old = find_custom(records, name) or {}
    url = base_url.rstrip("/") if base_url else old.get("base_url")
    if not url:
        raise UsageError(f"tether connect {name} needs --base-url URL (its OpenAI-compatible API)")
    now = iso_now()
    record: dict[str, Any] = {
        "id": f"local-provider-{name}",
        "name": name,
        "provider_type": "openai-compatible",
        "provider_category": "byok",
        "auth": {"type": "api", "key": api_key or record_key(old) or LOCAL_KEY},
        "base_url": url,
        "created_at": old.get("created_at", now),
        "updated_at": now,
    }
    if timeout is not None or "timeout" in old:
        record["timeout"] = timeout if timeout is not None else old["timeout"]
    records = [r for r in records if r.get("name") != name] + [record]
    _write_private(auth_path(home), json.dumps(records, indent=2) + "\n")
    return record


def remove_credential(home: Path, provider: str) -> bool:
    """Forget the record for `provider` (or a custom provider's name); False when there was none."""
    name = RECORD_NAMES.get(canonical_prefix(provider), provider)
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


# --- the Letta server of the hosted backend (`tether connect letta`) -------------------------

LETTA_RECORD = "lc-letta"  # not a model provider: the server the cloud backend talks to


def save_letta_credential(home: Path, *, api_key: str | None, base_url: str | None) -> dict[str, Any]:
    """Store the Letta server's key and/or URL (None keeps what was stored)."""
    _check_base_url(base_url)
    records = load_credentials(home)
    old = next((r for r in records if r.get("name") == LETTA_RECORD), {})
    key = api_key or record_key(old)
    url = base_url.rstrip("/") if base_url else old.get("base_url")
    if key is None and url is None:
        raise UsageError("tether connect letta needs --api-key KEY and/or --base-url URL")
    now = iso_now()
    record: dict[str, Any] = {
        "id": f"local-provider-{LETTA_RECORD}", "name": LETTA_RECORD, "provider_type": "letta",
        "provider_category": "byok", "auth": {"type": "api", "key": key or ""},
        "created_at": old.get("created_at", now), "updated_at": now,
    }
    if url:
        record["base_url"] = url
    records = [r for r in records if r.get("name") != LETTA_RECORD] + [record]
    _write_private(auth_path(home), json.dumps(records, indent=2) + "\n")
    return record


def letta_credential(home: Path) -> tuple[str | None, str | None]:
    """(base URL, API key) stored by `tether connect letta`, each None when absent."""
    record = next((r for r in load_credentials(home) if r.get("name") == LETTA_RECORD), None)
    if record is None:
        return None, None
    url = record.get("base_url")
    return (url if isinstance(url, str) and url else None), record_key(record)
