"""Stored credentials: private file modes, the reference's record shape, damage named."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tether.errors import UsageError
from tether.providers.credentials import (
    auth_path,
    load_credentials,
    remove_credential,
    save_credential,
)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_file_is_0600_and_dir_0700_even_with_a_loose_umask(tmp_path: Path) -> None:
    old = os.umask(0o000)
    try:
        save_credential(tmp_path, "anthropic", api_key="sk-ant-1", base_url=None, timeout=None)
    finally:
        os.umask(old)
    path = auth_path(tmp_path)
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700
    assert [p.name for p in path.parent.iterdir()] == ["auth.json"]  # no temp file left


def test_loose_existing_dir_is_tightened(tmp_path: Path) -> None:
    (tmp_path / "providers").mkdir(mode=0o755)
    save_credential(tmp_path, "openai", api_key="sk-1", base_url=None, timeout=None)
    assert mode(tmp_path / "providers") == 0o700


def test_record_shape_and_update_keeps_created_at_and_key(tmp_path: Path) -> None:
    first = save_credential(tmp_path, "openai", api_key="sk-1", base_url=None, timeout=None)
    assert first["id"] == "local-provider-lc-openai"
    assert first["name"] == "lc-openai"
    assert first["provider_category"] == "byok"
    assert first["auth"] == {"type": "api", "key": "sk-1"}
    assert "base_url" not in first and "timeout" not in first
    second = save_credential(
        tmp_path, "openai", api_key=None, base_url="https://proxy.example/v1/", timeout="10m"
    )
    assert second["auth"]["key"] == "sk-1"
    assert second["created_at"] == first["created_at"]
    assert (second["base_url"], second["timeout"]) == ("https://proxy.example/v1", "10m")
    assert load_credentials(tmp_path) == [second]
    assert json.loads(auth_path(tmp_path).read_text()) == [second]


def test_local_providers_default_to_not_needed_and_alias_is_one_record(tmp_path: Path) -> None:
    save_credential(
        tmp_path, "llama-cpp", api_key=None, base_url="http://box:8080/v1", timeout=None
    )
    rec = save_credential(tmp_path, "llama.cpp", api_key=None, base_url=None, timeout="off")
    assert rec["name"] == "lc-llama-cpp" and rec["auth"]["key"] == "not-needed"
    assert rec["base_url"] == "http://box:8080/v1"
    assert len(load_credentials(tmp_path)) == 1


def test_bad_inputs_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--api-key"):
        save_credential(tmp_path, "anthropic", api_key=None, base_url=None, timeout=None)
    with pytest.raises(UsageError, match="unknown provider 'gemini'"):
        save_credential(tmp_path, "gemini", api_key="k", base_url=None, timeout=None)
    with pytest.raises(UsageError, match="--timeout"):
        save_credential(tmp_path, "openai", api_key="k", base_url=None, timeout="soon")
    with pytest.raises(UsageError, match="http"):
        save_credential(tmp_path, "openai", api_key="k", base_url="proxy.example", timeout=None)
    assert not auth_path(tmp_path).exists()


def test_damaged_file_names_the_file(tmp_path: Path) -> None:
    path = auth_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text('[{"name": "lc-openai"')
    with pytest.raises(UsageError, match=str(path)):
        load_credentials(tmp_path)
    path.write_text('{"lc-openai": "sk"}')
    with pytest.raises(UsageError, match="list of provider records"):
        load_credentials(tmp_path)


def test_missing_file_is_no_records_and_remove(tmp_path: Path) -> None:
    assert load_credentials(tmp_path) == []
    save_credential(tmp_path, "ollama", api_key=None, base_url=None, timeout=None)
    assert remove_credential(tmp_path, "ollama") is True
    assert remove_credential(tmp_path, "ollama") is False
    assert load_credentials(tmp_path) == []
