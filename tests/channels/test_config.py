"""The channel files: accounts.json (redacted when shown, 0600), routing.yaml lookups,
pairing codes (one per sender, single use), plugin config schemas and bad files named."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tether.channels.config import Account, AccountStore, PairingStore, Route, RouteTable
from tether.channels.plugins import check_config, load_plugin, read_manifest
from tether.errors import UsageError


def test_accounts_round_trip_redacted_and_private(tether_home: Path) -> None:
    store = AccountStore(tether_home)
    account = Account("telegram", config={"token": "123:SECRET", "mode": "polling"})
    account.allowed_users = ["42"]
    store.upsert(account)
    loaded = store.get("telegram")
    assert loaded is not None and loaded.config["token"] == "123:SECRET"
    shown = loaded.redacted()
    assert "SECRET" not in str(shown) and shown["config"] == {"token": "[redacted]",
                                                              "mode": "[redacted]"}
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600


def test_routes_prefer_the_chat_over_the_wildcard(tether_home: Path) -> None:
    table = RouteTable(tether_home)
    table.add(Route("slack", "default", "*", "agent-a"))
    table.add(Route("slack", "default", "C1", "agent-b", "new"))
    assert table.lookup("slack", "default", "C1").agent_id == "agent-b"  # type: ignore[union-attr]
    assert table.lookup("slack", "default", "C9").agent_id == "agent-a"  # type: ignore[union-attr]
    assert table.lookup("slack", "other", "C1") is None
    assert table.remove("slack", "default", "C1") and not table.remove("slack", "default", "C1")
    assert [r.chat_id for r in table.load()] == ["*"]


def test_pairing_codes_are_stable_per_sender_and_used_once(tether_home: Path) -> None:
    store = PairingStore(tether_home)
    code = store.code_for("telegram", "default", "c1", "u1", "Ann")
    assert store.code_for("telegram", "default", "c1", "u1", "Ann") == code
    assert store.code_for("telegram", "default", "c2", "u2", None) != code
    with pytest.raises(UsageError, match="no pending pairing code"):
        store.take("slack", code)  # another channel's code
    assert store.take("telegram", code.lower()).sender_id == "u1"
    with pytest.raises(UsageError):
        store.take("telegram", code)


BAD_FILES = [
    ("accounts.json", "{not json", "not valid JSON"),
    ("accounts.json", '{"accounts": [{"channel": "telegram", "dmPolicy": "maybe"}]}', "dmPolicy"),
    ("accounts.json", '{"accounts": [{"channel": "Tele gram"}]}', "a-z"),
    ("routing.yaml", "routes: [{channel: slack}]", "needs 'chat'"),
    ("routing.yaml", "routes: {a: 1}", "must be a list"),
    ("routing.yaml", "routes: [\n  - {", "not valid YAML"),
]


@pytest.mark.parametrize(("name", "text", "why"), BAD_FILES)
def test_bad_files_are_named(tether_home: Path, name: str, text: str, why: str) -> None:
    path = tether_home / "channels" / name
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(UsageError, match=why):
        AccountStore(tether_home).load() if name == "accounts.json" else RouteTable(
            tether_home).load()


def test_bundled_plugins_check_their_config(tether_home: Path) -> None:
    webhook = load_plugin(tether_home, "webhook")
    check_config(webhook, {"secret": "s" * 16, "port": 8080})
    with pytest.raises(UsageError, match="needs config 'secret'"):
        check_config(webhook, {})
    with pytest.raises(UsageError, match="at least 16 characters"):
        check_config(webhook, {"secret": ""})
    with pytest.raises(UsageError, match="'port' must be a number"):
        check_config(webhook, {"secret": "s" * 16, "port": "eighty"})
    telegram = load_plugin(tether_home, "telegram")
    with pytest.raises(UsageError, match="'mode' must be a select"):
        check_config(telegram, {"token": "t", "mode": "carrier-pigeon"})


@pytest.mark.parametrize(("manifest", "why"), [
    ('{"id": "x", "entry": "../evil.py"}', "inside the channel's folder"),
    ('{"id": "x", "entry": "/etc/evil.py"}', "inside the channel's folder"),
    ('{"id": "X Y", "entry": "e.py"}', "a-z"),
    ('{"entry": "e.py"}', "'id' is required"),
    ("[]", "must be an object"),
])
def test_bad_manifests_are_refused(tmp_path: Path, manifest: str, why: str) -> None:
    (tmp_path / "channel.json").write_text(manifest)
    with pytest.raises(UsageError, match=why):
        read_manifest(tmp_path)
