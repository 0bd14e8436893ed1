"""Who may talk to an agent through a channel (reference §14): the account's `dmPolicy`
(pairing | allowlist | open), `allowedUsers` (`*` = anyone), admins, the group policy, and the
environment's additions (`TETHER_CHANNELS_ALLOWED_USERS`, `TETHER_<CH>_ALLOWED_USERS`,
`TETHER_<CH>_ADMIN_USERS`, `TETHER_<CH>_ALLOW_ALL_USERS=1`). Pure: no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tether.channels.config import Account
from tether.channels.plugins import InboundMessage


@dataclass(frozen=True, slots=True)
class Verdict:
    action: str  # "allow" | "pair" (answer with a pairing code) | "ignore" | "deny"
    reason: str
    admin: bool = False


def _env_list(env: Mapping[str, str], name: str) -> set[str]:
    return {u.strip() for u in env.get(name, "").split(",") if u.strip()}


def allowed_users(account: Account, env: Mapping[str, str]) -> tuple[set[str], set[str]]:
    """(allowed, admins) for the account, the environment's additions included."""
    prefix = f"TETHER_{account.channel.upper().replace('-', '_')}"
    allowed = set(account.allowed_users) | _env_list(env, "TETHER_CHANNELS_ALLOWED_USERS")
    allowed |= _env_list(env, f"{prefix}_ALLOWED_USERS")
    if env.get(f"{prefix}_ALLOW_ALL_USERS") == "1":
        allowed.add("*")
    admins = set(account.admin_users) | _env_list(env, f"{prefix}_ADMIN_USERS")
    return allowed | admins, admins


def decide(account: Account, msg: InboundMessage, env: Mapping[str, str]) -> Verdict:
    allowed, admins = allowed_users(account, env)
    admin = msg.sender_id in admins
    listed = admin or msg.sender_id in allowed or "*" in allowed
    if msg.chat_type != "direct":
        if account.group_policy == "disabled":
            return Verdict("ignore", "group chats are disabled for this account")
        if account.group_policy == "mention" and not msg.is_mention:
            return Verdict("ignore", "in a group the bot answers only when mentioned")
        if not listed:
            return Verdict("deny", f"user {msg.sender_id} is not on the allowlist")
        return Verdict("allow", "allowed user in a group", admin)
    if listed:
        return Verdict("allow", "allowed user", admin)
    if account.dm_policy == "open":
        return Verdict("allow", "dmPolicy open")
    if account.dm_policy == "pairing":
        return Verdict("pair", f"user {msg.sender_id} is not paired yet")
    return Verdict("deny", f"user {msg.sender_id} is not on the allowlist")
