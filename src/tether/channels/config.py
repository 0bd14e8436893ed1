"""The channel files (accounts.json, routing.yaml, pairing.yaml, gateway-status.json) as the
gateway sees them: the format itself lives in `tether.runtime.channel_files`, where the App
Server's channel requests read and write the same files."""

from __future__ import annotations

from tether.runtime.channel_files import (
    DM_POLICIES,
    GROUP_POLICIES,
    ID_CHARS,
    PAIRING_TTL,
    REDACTED,
    Account,
    AccountStore,
    GatewaySnapshot,
    GatewayStatus,
    PairingRequest,
    PairingStore,
    Route,
    RouteTable,
    channels_dir,
    check_id,
    signature,
)

__all__ = [
    "DM_POLICIES", "GROUP_POLICIES", "ID_CHARS", "PAIRING_TTL", "REDACTED", "Account",
    "AccountStore", "GatewaySnapshot", "GatewayStatus", "PairingRequest", "PairingStore", "Route", "RouteTable",
    "channels_dir", "check_id", "signature",
]
