"""Timeout precedence (§5) and the value grammar."""

from __future__ import annotations

import pytest

from tether.errors import UsageError
from tether.providers.timeouts import parse_timeout, provider_stem, resolve_timeout_s


def test_stems() -> None:
    assert [
        provider_stem(p) for p in ("anthropic", "llama.cpp", "lc-llama-cpp", "openai-compatible")
    ] == [
        "ANTHROPIC",
        "LLAMA_CPP",
        "LLAMA_CPP",
        "OPENAI_COMPATIBLE",
    ]


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("1500", 1.5), ("600s", 600.0), ("10m", 600.0), ("250ms", 0.25), (" 2s ", 2.0), (90000, 90.0),
     ("off", None), ("false", None), ("None", None), ("disabled", None), (False, None)],
)  # fmt: skip
def test_values(value: str | int, seconds: float | None) -> None:
    assert parse_timeout(value, "X") == seconds


@pytest.mark.parametrize("value", ["soon", "10h", "-5", "0", "1e3", ""])
def test_bad_values_name_the_setting(value: str) -> None:
    with pytest.raises(UsageError, match="OLLAMA_TIMEOUT_MS"):
        parse_timeout(value, "OLLAMA_TIMEOUT_MS")


def test_precedence_record_then_tether_stem_then_stem_then_local_then_default() -> None:
    env = {
        "TETHER_OLLAMA_TIMEOUT_MS": "2000",
        "OLLAMA_TIMEOUT_MS": "3000",
        "TETHER_LOCAL_PROVIDER_TIMEOUT_MS": "4000",
    }
    assert resolve_timeout_s("ollama", env, "1s") == 1.0
    assert resolve_timeout_s("ollama", env) == 2.0
    del env["TETHER_OLLAMA_TIMEOUT_MS"]
    assert resolve_timeout_s("ollama", env) == 3.0
    del env["OLLAMA_TIMEOUT_MS"]
    assert resolve_timeout_s("ollama", env) == 4.0
    assert resolve_timeout_s("ollama", {}) == 300.0
    assert resolve_timeout_s("llama.cpp", {"LLAMA_CPP_TIMEOUT_MS": "off"}) is None


def test_bad_env_value_names_the_variable() -> None:
    with pytest.raises(UsageError, match="TETHER_ANTHROPIC_TIMEOUT_MS"):
        resolve_timeout_s("anthropic", {"TETHER_ANTHROPIC_TIMEOUT_MS": "forever"})
    with pytest.raises(UsageError, match="stored credential for anthropic"):
        resolve_timeout_s("anthropic", {}, "forever")
