"""How long tether waits for a provider: the §5 precedence and the value grammar (ms, `600s`, `10m`, `off`)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from tether.errors import UsageError

DEFAULT_TIMEOUT_S = 300.0
LOCAL_TIMEOUT_ENV = "TETHER_LOCAL_PROVIDER_TIMEOUT_MS"
_DISABLED = frozenset({"false", "off", "none", "disabled"})
_VALUE = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m)?")
_UNIT_S = {"ms": 0.001, None: 0.001, "s": 1.0, "m": 60.0}


def provider_stem(provider: str) -> str:
    """`llama.cpp` -> `LLAMA_CPP`, `lc-openai-chat` -> `OPENAI_CHAT`: the env var stem."""
    name = provider.removeprefix("lc-")
    return re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_").upper()


def timeout_env_name(provider: str) -> str:
    return f"TETHER_{provider_stem(provider)}_TIMEOUT_MS"


def parse_timeout(value: str | int | float, source: str) -> float | None:
    """Seconds, or None for no timeout. A bare number is milliseconds. `source` names the setting."""
    if isinstance(value, bool):
        if value is False:
            return None
        raise UsageError(
            f"{source}: timeout must be milliseconds, '600s', '10m' or 'off', not true"
        )
    if isinstance(value, int | float):
        seconds = float(value) / 1000
    else:
        text = value.strip().lower()
        if text in _DISABLED:
            return None
        m = _VALUE.fullmatch(text)
        if m is None:
            raise UsageError(
                f"{source}: timeout {value!r} is not understood; use milliseconds (300000), "
                "seconds or minutes ('600s', '10m'), or 'off' for no timeout"
            )
        seconds = float(m.group(1)) * _UNIT_S[m.group(2)]
    if seconds <= 0:
        raise UsageError(f"{source}: timeout must be positive; use 'off' for no timeout")
    return seconds


def resolve_timeout_s(
    provider: str, env: Mapping[str, str], record_timeout: str | int | float | None = None
) -> float | None:
    """Record `timeout` -> TETHER_<STEM>_TIMEOUT_MS -> <STEM>_TIMEOUT_MS -> the local default -> 300 s."""
    if record_timeout is not None and record_timeout != "":
        return parse_timeout(record_timeout, f"the stored credential for {provider} (timeout)")
    stem = provider_stem(provider)
    for name in (f"TETHER_{stem}_TIMEOUT_MS", f"{stem}_TIMEOUT_MS", LOCAL_TIMEOUT_ENV):
        value = env.get(name)
        if value is not None and value.strip():
            return parse_timeout(value, name)
    return DEFAULT_TIMEOUT_S
