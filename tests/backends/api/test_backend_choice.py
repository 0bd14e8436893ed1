"""Which backend a run uses and where its Letta server is."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.cli.flags import parse_run_flags
from tether.errors import UsageError
from tether.providers.credentials import letta_credential, load_credentials, save_letta_credential
from tether.runtime.session.backend_choice import (
    LETTA_CLOUD_URL,
    LettaServer,
    check_key,
    choose_backend,
    letta_server,
    parse_backend,
    save_backend,
    saved_backend,
)


@pytest.mark.parametrize("value, mode", [("local", "local"), ("cloud", "cloud"), ("api", "cloud"),
                                         ("CLOUD", "cloud")])
def test_backend_values(value: str, mode: str) -> None:
    assert parse_backend(value) == mode


@pytest.mark.parametrize("argv", [["--backend", "moon", "-p", "x"], ["--backend=", "-p", "x"]])
def test_a_bad_backend_flag_names_itself(argv: list[str]) -> None:
    with pytest.raises(UsageError, match="--backend"):
        parse_run_flags(argv, stdin_is_tty=True)


def test_flag_then_saved_default_then_local(tether_home: Path) -> None:
    assert choose_backend(None, tether_home) == "local"
    save_backend(tether_home, "cloud")
    assert saved_backend(tether_home) == "cloud"
    assert choose_backend(None, tether_home) == "cloud"
    assert choose_backend("local", tether_home) == "local"
    assert choose_backend(None, tether_home, {"TETHER_BACKEND": "local"}) == "local"
    assert choose_backend("cloud", tether_home, {"TETHER_BACKEND": "local"}) == "cloud"
    with pytest.raises(UsageError, match="TETHER_BACKEND 'moon'"):
        choose_backend(None, tether_home, {"TETHER_BACKEND": "moon"})
    assert parse_run_flags(["--backend", "api", "-p", "x"], stdin_is_tty=True).backend == "cloud"


def test_a_damaged_saved_default_is_named(tether_home: Path) -> None:
    path = tether_home / "state" / "backend.json"
    path.parent.mkdir(parents=True)
    path.write_text("{nope")
    with pytest.raises(UsageError, match="backend.json"):
        saved_backend(tether_home)
    path.write_text('{"preferredBackendMode": "moon"}')
    with pytest.raises(UsageError, match="preferredBackendMode"):
        saved_backend(tether_home)


def test_env_wins_over_tether_connect_letta_which_wins_over_letta_cloud(tether_home: Path) -> None:
    assert letta_server({}, tether_home) == LettaServer(LETTA_CLOUD_URL, None)
    save_letta_credential(tether_home, api_key="sk-stored", base_url="http://127.0.0.1:8283/")
    assert letta_credential(tether_home) == ("http://127.0.0.1:8283", "sk-stored")
    assert letta_server({}, tether_home) == LettaServer("http://127.0.0.1:8283", "sk-stored")
    env = {"LETTA_BASE_URL": "http://127.0.0.1:9999", "LETTA_API_KEY": "sk-env"}
    assert letta_server(env, tether_home) == LettaServer("http://127.0.0.1:9999", "sk-env")
    # the letta record is not a model provider: it lives beside them without disturbing them
    assert [r["name"] for r in load_credentials(tether_home)] == ["lc-letta"]


def test_headless_against_letta_cloud_needs_the_key_in_the_environment() -> None:
    with pytest.raises(UsageError) as err:
        check_key(LettaServer(LETTA_CLOUD_URL, "stored-login"), headless=True, env={})
    assert str(err.value).startswith("Missing LETTA_API_KEY\nHeadless mode requires an API key")
    check_key(LettaServer(LETTA_CLOUD_URL, None), headless=True, env={"LETTA_API_KEY": "k"})
    check_key(LettaServer(LETTA_CLOUD_URL, None), headless=False, env={})
    check_key(LettaServer("http://127.0.0.1:8283", None), headless=True, env={})  # self-hosted


def test_tether_connect_letta_needs_something(tether_home: Path) -> None:
    with pytest.raises(UsageError, match="--api-key"):
        save_letta_credential(tether_home, api_key=None, base_url=None)
    with pytest.raises(UsageError, match="http"):
        save_letta_credential(tether_home, api_key="k", base_url="letta.example")
