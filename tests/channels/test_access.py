"""Access control of channel messages (pure): dm policies, allowlists with `*`, admins,
group policies and the environment's additions."""

from __future__ import annotations

import pytest

from tether.channels.access import decide
from tether.channels.config import Account
from tether.channels.plugins import InboundMessage


def msg(sender: str = "u1", chat_type: str = "direct", mention: bool = False) -> InboundMessage:
    return InboundMessage("telegram", "default", "c1", sender, "hi", 0.0, "m1",
                          chat_type=chat_type, is_mention=mention)


def account(**kw: object) -> Account:
    a = Account("telegram")
    for k, v in kw.items():
        setattr(a, k, v)
    return a


CASES = [
    # (account fields, env, message, expected action, admin)
    ({"dm_policy": "pairing"}, {}, msg(), "pair", False),
    ({"dm_policy": "allowlist"}, {}, msg(), "deny", False),
    ({"dm_policy": "open"}, {}, msg(), "allow", False),
    ({"allowed_users": ["u1"]}, {}, msg(), "allow", False),
    ({"allowed_users": ["u1"]}, {}, msg("u2"), "pair", False),
    ({"allowed_users": ["*"], "dm_policy": "allowlist"}, {}, msg("anyone"), "allow", False),
    ({"admin_users": ["boss"], "dm_policy": "allowlist"}, {}, msg("boss"), "allow", True),
    ({"dm_policy": "allowlist"}, {"TETHER_CHANNELS_ALLOWED_USERS": "a, u1"}, msg(), "allow", False),
    ({"dm_policy": "allowlist"}, {"TETHER_TELEGRAM_ALLOWED_USERS": "u1"}, msg(), "allow", False),
    ({"dm_policy": "allowlist"}, {"TETHER_SLACK_ALLOWED_USERS": "u1"}, msg(), "deny", False),
    ({"dm_policy": "allowlist"}, {"TETHER_TELEGRAM_ALLOW_ALL_USERS": "1"}, msg("x"), "allow", False),
    ({"dm_policy": "allowlist"}, {"TETHER_TELEGRAM_ALLOW_ALL_USERS": "true"}, msg("x"), "deny",
     False),
    ({"dm_policy": "allowlist"}, {"TETHER_TELEGRAM_ADMIN_USERS": "u1"}, msg(), "allow", True),
    ({"allowed_users": ["u1"], "group_policy": "mention"}, {}, msg(chat_type="channel"),
     "ignore", False),
    ({"allowed_users": ["u1"], "group_policy": "mention"}, {},
     msg(chat_type="channel", mention=True), "allow", False),
    ({"allowed_users": ["u1"], "group_policy": "disabled"}, {},
     msg(chat_type="channel", mention=True), "ignore", False),
    ({"allowed_users": ["u1"], "group_policy": "open", "dm_policy": "open"}, {},
     msg("u2", chat_type="channel"), "deny", False),  # dm `open` does not open groups
]


@pytest.mark.parametrize(("fields", "env", "message", "action", "admin"), CASES)
def test_access_decision(fields: dict[str, object], env: dict[str, str],
                         message: InboundMessage, action: str, admin: bool) -> None:
    verdict = decide(account(**fields), message, env)
    assert (verdict.action, verdict.admin) == (action, admin), verdict.reason
