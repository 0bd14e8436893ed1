"""Who may talk to the App Server (reference §12.2): the listen-address policy, the bearer check
at the HTTP upgrade, and the Origin and Host (DNS rebinding) checks.

Pure apart from reading the secret files once at startup: request checks take the raw header
pairs and the current time, and return a `Rejection` (status + message) or the `Grant` of the
credential. Messages never contain the token. Order of the request checks: Host (403) → bearer
(401) → Origin (403 unless a bearer credential validated).

Scoped tokens (beyond the reference; security case e12): a signed bearer token may carry
`"agents": [ids]` and/or `"conversations": [ids]`. Its connection may then start runtimes only
for those agents / conversations, may not create an agent (when either is set) or a
conversation (when `conversations` is set), and is refused a conversation it does not hold in
the same words whether or not that conversation exists. A token without those claims, a
capability token and a tokenless loopback server grant everything.

Permission modes (issue 14): a scoped token runs its conversations in `strict` or `standard`
only; its `"modes"` claim may add `acceptEdits` (edits inside the runtime's workspace), never
`unrestricted` (such a token is refused, 401). Any token may carry `"modes"` to limit itself.
The server also refuses a scoped client a working directory that holds tether's own state
(`runtime_start.check_workspace`) and any loosening from a trusted folder's project settings
(`check_scoped_folder`), and runs its conversations in the workspace sandbox: it answers its
own approvals, so the kernel is what bounds it.

Time claims (`exp` required, `nbf`, `iat`) must be JSON numbers within years 0..9999: NaN,
±Infinity, 1e999, booleans, strings and huge integers are refused (401), as are tokens over
MAX_TOKEN_CHARS, any `alg` but HS256, and headers with `crit`.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import math
import os
import re
import socket
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.errors import UsageError

AUTH_MODES = ("capability-token", "signed-bearer-token")
DEFAULT_CLOCK_SKEW_S = 30
MIN_SECRET_BYTES = 32
MAX_TOKEN_CHARS = 8192  # a bearer longer than this is refused before it is decoded
MAX_TIMESTAMP = 253_402_300_799  # 9999-12-31T23:59:59Z: larger time claims are not timestamps

MISSING_TOKEN = "missing websocket bearer token"
INVALID_HEADER = "invalid authorization header"
INVALID_TOKEN = "invalid websocket bearer token"
INVALID_JWT = "invalid websocket jwt"
EXPIRED_JWT = "expired websocket jwt"
ORIGIN_FORBIDDEN = "requests with an Origin header need a valid bearer token"
HOST_FORBIDDEN = "Host header does not name this server"

_HEX64 = re.compile(r"[0-9a-fA-F]{64}")

Headers = Sequence[tuple[str, str]]
Resolver = Callable[[str], Iterable[str]]


@dataclass(frozen=True, slots=True)
class AuthFlags:
    """The `--ws-*` flags as given (strings, unvalidated)."""

    ws_auth: str | None = None
    ws_token_file: str | None = None
    ws_token_sha256: str | None = None
    ws_shared_secret_file: str | None = None
    ws_issuer: str | None = None
    ws_audience: str | None = None
    ws_max_clock_skew_seconds: str | None = None


@dataclass(frozen=True, slots=True)
class AuthPolicy:
    """What a request must carry; `mode=None` means no bearer is required (loopback only)."""

    mode: str | None = None
    token_sha256: bytes | None = field(default=None, repr=False)
    secret: bytes | None = field(default=None, repr=False)
    issuer: str | None = None
    audience: str | None = None
    skew_s: int = DEFAULT_CLOCK_SKEW_S


@dataclass(frozen=True, slots=True)
class Rejection:
    status: int
    message: str


@dataclass(frozen=True, slots=True)
class Grant:
    """What an authenticated client may address; None: no limit of that kind."""

    agents: frozenset[str] | None = None
    conversations: frozenset[str] | None = None
    modes: frozenset[str] | None = None  # permission modes it may run a conversation in

    @property
    def scoped(self) -> bool:
        return self.agents is not None or self.conversations is not None

    def refusal(
        self,
        agent_id: str | None,
        conversation_id: str | None,
        *,
        create_agent: bool = False,
        create_conversation: bool = False,
    ) -> str | None:
        """Why this grant does not cover the request (None: it does). Checked before anything
        is looked up or created, so the answer says nothing about what exists."""
        if create_agent and self.scoped:
            return "this connection's token may not create agents (it is scoped)"
        if self.agents is not None and agent_id is not None and agent_id not in self.agents:
            return f"this connection's token does not grant agent {agent_id}"
        if self.conversations is not None:
            if create_conversation:
                return (
                    "this connection's token may not create conversations "
                    "(it is scoped to conversations)"
                )
            if conversation_id is not None and conversation_id not in self.conversations:
                return f"this connection's token does not grant conversation {conversation_id}"
        return None

    def mode_refusal(self, mode: str) -> str | None:
        """Why a conversation may not run in permission mode `mode` for this client (None: it
        may). `mode` is canonical (`standard`, `acceptEdits`, `unrestricted`, `strict`)."""
        if self.modes is None or mode in self.modes:
            return None
        allowed = ", ".join(m for m in SCOPED_MODE_ORDER if m in self.modes)
        return (
            f"this connection's token may not use permission mode {mode} "
            f"(it allows: {allowed or 'none'})"
        )


# A scoped token (agents / conversations) runs conversations in these modes unless its `modes`
# claim adds acceptEdits; `unrestricted` is never granted to one (its claim is refused).
SCOPED_DEFAULT_MODES = frozenset({"strict", "standard"})
SCOPED_MODE_ORDER = ("strict", "standard", "acceptEdits", "unrestricted")


FULL_GRANT = Grant()
NO_GRANT = Grant(frozenset(), frozenset())  # until a request's credential has been checked


# --- startup ----------------------------------------------------------------------------------


def policy_from_flags(flags: AuthFlags) -> AuthPolicy:
    """Validate the flag combination and read the secret files; UsageError names the flag."""
    token_flags = {
        "--ws-token-file": flags.ws_token_file,
        "--ws-token-sha256": flags.ws_token_sha256,
    }
    jwt_flags = {
        "--ws-shared-secret-file": flags.ws_shared_secret_file,
        "--ws-issuer": flags.ws_issuer,
        "--ws-audience": flags.ws_audience,
        "--ws-max-clock-skew-seconds": flags.ws_max_clock_skew_seconds,
    }
    given = [name for name, value in {**token_flags, **jwt_flags}.items() if value is not None]
    if flags.ws_auth is None:
        if given:
            raise UsageError(
                f"{given[0]} requires `--ws-auth capability-token` or `--ws-auth signed-bearer-token`"
            )
        return AuthPolicy()
    if flags.ws_auth == "capability-token":
        stray = [name for name, value in jwt_flags.items() if value is not None]
        if stray:
            raise UsageError(f"{stray[0]} only applies to `--ws-auth signed-bearer-token`")
        if flags.ws_token_file is not None and flags.ws_token_sha256 is not None:
            raise UsageError("`--ws-token-file` and `--ws-token-sha256` are mutually exclusive")
        if flags.ws_token_file is not None:
            token = read_secret_file("--ws-token-file", flags.ws_token_file).decode(
                "utf-8", "replace"
            )
            return AuthPolicy("capability-token", token_sha256=sha256(token))
        if flags.ws_token_sha256 is not None:
            digest = flags.ws_token_sha256.strip()
            if not _HEX64.fullmatch(digest):
                raise UsageError("--ws-token-sha256 must be a 64-character hex SHA-256 digest")
            return AuthPolicy("capability-token", token_sha256=bytes.fromhex(digest))
        raise UsageError(
            "`--ws-token-file` or `--ws-token-sha256` is required with `--ws-auth capability-token`"
        )
    if flags.ws_auth == "signed-bearer-token":
        stray = [name for name, value in token_flags.items() if value is not None]
        if stray:
            raise UsageError(f"{stray[0]} only applies to `--ws-auth capability-token`")
        if flags.ws_shared_secret_file is None:
            raise UsageError(
                "`--ws-shared-secret-file` is required with `--ws-auth signed-bearer-token`"
            )
        secret = read_secret_file("--ws-shared-secret-file", flags.ws_shared_secret_file)
        if len(secret) < MIN_SECRET_BYTES:
            raise UsageError(
                f"--ws-shared-secret-file must hold at least {MIN_SECRET_BYTES} bytes "
                f"(it holds {len(secret)})"
            )
        skew = DEFAULT_CLOCK_SKEW_S
        if flags.ws_max_clock_skew_seconds is not None:
            try:
                skew = int(flags.ws_max_clock_skew_seconds)
            except ValueError:
                skew = -1
            if skew < 0:
                raise UsageError("--ws-max-clock-skew-seconds must be a non-negative integer")
        for name, value in (("--ws-issuer", flags.ws_issuer), ("--ws-audience", flags.ws_audience)):
            if value is not None and not value.strip():
                raise UsageError(f"{name} must not be empty")
        return AuthPolicy(
            "signed-bearer-token",
            secret=secret,
            issuer=flags.ws_issuer,
            audience=flags.ws_audience,
            skew_s=skew,
        )
    raise UsageError(
        f"unsupported --ws-auth mode {flags.ws_auth!r}; expected one of: {', '.join(AUTH_MODES)}"
    )


def read_secret_file(flag: str, value: str) -> bytes:
    """A secret file's trimmed bytes: absolute, not a symlink, a regular file only its owner can
    read, and not empty (e13)."""
    path = Path(value)
    if not path.is_absolute():
        raise UsageError(f"{flag} must be an absolute path (got {value!r})")
    try:
        info = os.lstat(path)
    except OSError as exc:
        raise UsageError(f"{flag}: cannot read {path}: {exc.strerror}") from None
    if stat.S_ISLNK(info.st_mode):
        raise UsageError(f"{flag}: {path} is a symlink; point the flag at the file itself")
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{flag}: {path} is not a regular file")
    if info.st_mode & 0o077:
        raise UsageError(
            f"{flag}: {path} is accessible by group or others (mode {stat.S_IMODE(info.st_mode):04o}); "
            f"run `chmod 600 {path}`"
        )
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise UsageError(f"{flag}: cannot read {path}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "rb") as f:
            data = f.read().strip()
    except OSError as exc:
        raise UsageError(f"{flag}: cannot read {path}: {exc.strerror}") from None
    if not data:
        raise UsageError(f"{flag}: {path} is empty")
    return data


def is_loopback_host(host: str, resolve: Resolver | None = None) -> bool:
    """127.0.0.0/8, ::1, ::ffff:127.x; `localhost` only if every address it resolves to is one."""
    name = normalize_host(host)
    try:
        return _loopback_ip(ipaddress.ip_address(name))
    except ValueError:
        pass
    if name != "localhost":
        return False
    try:
        addresses = list((resolve or _resolve)(name))
    except OSError:
        return False
    return bool(addresses) and all(_loopback_text(a) for a in addresses)


def check_listen(host: str, policy: AuthPolicy, resolve: Resolver | None = None) -> None:
    """Refuse (before binding) to listen beyond loopback without auth (e1)."""
    if policy.mode is None and not is_loopback_host(host, resolve):
        raise UsageError(
            f"refusing to listen on non-loopback host {host!r} without auth; configure "
            "`--ws-auth capability-token` or `--ws-auth signed-bearer-token`"
        )


def allowed_host_headers(bind_host: str, port: int) -> frozenset[str] | None:
    """The Host header values a request may carry; None for a wildcard bind (no check)."""
    name = normalize_host(bind_host)
    if name in ("0.0.0.0", "::", ""):
        return None
    names = {_host_literal(name)}
    if is_loopback_host(name, resolve=lambda _: ["127.0.0.1"]):
        names |= {"localhost", "127.0.0.1", "[::1]"}
    out = {f"{n}:{port}" for n in names}
    if port == 80:
        out |= names
    return frozenset(out)


# --- per request --------------------------------------------------------------------------------


def check_request(
    headers: Headers,
    policy: AuthPolicy,
    *,
    allowed_hosts: frozenset[str] | None,
    now: float,
) -> Rejection | Grant:
    """Everything an HTTP request (upgrade or not) must pass before the server looks at it."""
    hosts = _values(headers, "host")
    if allowed_hosts is not None and (
        len(hosts) != 1 or hosts[0].strip().lower() not in allowed_hosts
    ):
        return Rejection(403, HOST_FORBIDDEN)
    result = authenticate(headers, policy, now) if policy.mode is not None else FULL_GRANT
    bearer_ok = policy.mode is not None and isinstance(result, Grant)
    if _values(headers, "origin") and not bearer_ok:
        return Rejection(403, ORIGIN_FORBIDDEN)
    return result


def authenticate(headers: Headers, policy: AuthPolicy, now: float) -> Rejection | Grant:
    token = bearer_token(headers)
    if isinstance(token, Rejection):
        return token
    if policy.mode == "capability-token":
        assert policy.token_sha256 is not None
        if hmac.compare_digest(sha256(token), policy.token_sha256):
            return FULL_GRANT
        return Rejection(401, INVALID_TOKEN)
    if policy.mode == "signed-bearer-token":
        return verify_jwt(token, policy, now)
    return FULL_GRANT


def bearer_token(headers: Headers) -> str | Rejection:
    """The token of the one `Authorization: Bearer <t>` header (scheme case-insensitive)."""
    values = _values(headers, "authorization")
    if not values:
        return Rejection(401, MISSING_TOKEN)
    if len(values) > 1:
        return Rejection(401, INVALID_HEADER)
    scheme, _, rest = values[0].strip().partition(" ")
    token = rest.strip()
    if scheme.lower() != "bearer" or not token or not token.isascii() or not token.isprintable():
        return Rejection(401, INVALID_HEADER)
    return token


def verify_jwt(token: str, policy: AuthPolicy, now: float) -> Rejection | Grant:
    """HS256 only; signature by PyJWT (HMAC compared in constant time), claims checked here
    against `now` so the skew rules are exact: exp required, nbf and iss/aud when configured,
    and the scope claims (`agents`, `conversations`) lists of ids when present."""
    import jwt

    assert policy.secret is not None
    if len(token) > MAX_TOKEN_CHARS:  # before any base64 or JSON work
        return Rejection(401, INVALID_JWT)
    try:
        header = jwt.get_unverified_header(token)
        # `crit` names extensions a verifier must understand (RFC 7515 §4.1.11): none here.
        if header.get("alg") != "HS256" or "crit" in header:
            return Rejection(401, INVALID_JWT)
        claims: dict[str, Any] = jwt.decode(
            token,
            policy.secret,
            algorithms=["HS256"],
            options={
                "verify_signature": True,
                "verify_exp": False,
                "verify_nbf": False,
                "verify_iat": False,
                "verify_aud": False,
                "verify_iss": False,
            },
        )
    except (jwt.PyJWTError, ValueError, TypeError, RecursionError):
        return Rejection(401, INVALID_JWT)
    exp = _timestamp(claims, "exp")
    if exp is None:
        return Rejection(401, INVALID_JWT)
    if now > exp + policy.skew_s:
        return Rejection(401, EXPIRED_JWT)
    for name in ("nbf", "iat"):  # not yet valid / issued in the future: both beyond the skew
        if name in claims:
            value = _timestamp(claims, name)
            if value is None or now < value - policy.skew_s:
                return Rejection(401, INVALID_JWT)
    if policy.issuer is not None and claims.get("iss") != policy.issuer:
        return Rejection(401, INVALID_JWT)
    if policy.audience is not None:
        aud = claims.get("aud")
        audiences = aud if isinstance(aud, list) else [aud]
        if policy.audience not in [a for a in audiences if isinstance(a, str)]:
            return Rejection(401, INVALID_JWT)
    scope: dict[str, frozenset[str] | None] = {}
    for claim in ("agents", "conversations"):
        value = claims.get(claim)
        if value is None:
            scope[claim] = None
        elif isinstance(value, list) and all(isinstance(v, str) and v for v in value):
            scope[claim] = frozenset(value)
        else:  # a malformed scope must not widen into "everything"
            return Rejection(401, INVALID_JWT)
    modes = _modes_claim(claims.get("modes"), scoped=any(v is not None for v in scope.values()))
    if isinstance(modes, Rejection):
        return modes
    return Grant(scope["agents"], scope["conversations"], modes)


def _modes_claim(value: Any, *, scoped: bool) -> frozenset[str] | None | Rejection:
    """The `modes` claim: permission modes (aliases accepted) the token may use. A scoped token
    without one gets SCOPED_DEFAULT_MODES; one naming `unrestricted` is refused outright."""
    from tether.core.permissions.modes import normalize_mode

    if value is None:
        return SCOPED_DEFAULT_MODES if scoped else None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return Rejection(401, INVALID_JWT)
    try:
        modes = frozenset(normalize_mode(v) for v in value)
    except UsageError:
        return Rejection(401, INVALID_JWT)
    if scoped and "unrestricted" in modes:
        return Rejection(401, INVALID_JWT)
    return modes


# --- helpers ------------------------------------------------------------------------------------


def sha256(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).digest()


def normalize_host(host: str) -> str:
    return host.strip().lower().removeprefix("[").removesuffix("]")


def _host_literal(name: str) -> str:
    return f"[{name}]" if ":" in name else name


def _values(headers: Headers, name: str) -> list[str]:
    return [v for k, v in headers if k.lower() == name]


def _timestamp(claims: dict[str, Any], name: str) -> float | None:
    """A time claim as seconds since the epoch, or None when it is not one: a JSON number (not a
    boolean or a string), finite, and within year 0..9999 (NaN, ±Infinity, 1e999 and 400-digit
    integers would otherwise compare as "never expires" or overflow float())."""
    value = claims.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int):
        return float(value) if 0 <= value <= MAX_TIMESTAMP else None
    return value if math.isfinite(value) and 0 <= value <= MAX_TIMESTAMP else None


def _loopback_ip(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped in ipaddress.IPv4Network("127.0.0.0/8")
        return ip == ipaddress.IPv6Address("::1")
    return ip in ipaddress.IPv4Network("127.0.0.0/8")


def _loopback_text(address: str) -> bool:
    try:
        return _loopback_ip(ipaddress.ip_address(address.split("%", 1)[0]))
    except ValueError:
        return False


def _resolve(name: str) -> list[str]:
    return [str(info[4][0]) for info in socket.getaddrinfo(name, None)]
