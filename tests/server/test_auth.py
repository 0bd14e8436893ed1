"""The App Server's auth rules (reference §12.2, security cases e1–e8, e13) as pure checks."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import jwt
import pytest

from tether.errors import UsageError
from tether.server import auth
from tether.server.auth import FULL_GRANT, AuthFlags, AuthPolicy, Grant, Rejection, check_request

NOW = 1_800_000_000.0
SECRET = b"s" * 32
TOKEN = "capability-token-123"
HOSTS = auth.allowed_host_headers("127.0.0.1", 8123)


def secret_file(tmp_path: Path, data: bytes | str, mode: int = 0o600, name: str = "secret") -> str:
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    path.chmod(mode)
    return str(path)


def cap_policy() -> AuthPolicy:
    return AuthPolicy("capability-token", token_sha256=hashlib.sha256(TOKEN.encode()).digest())


def jwt_policy(**kw: object) -> AuthPolicy:
    return AuthPolicy("signed-bearer-token", secret=SECRET, **kw)


def headers(*pairs: tuple[str, str], host: str | None = "127.0.0.1:8123") -> list[tuple[str, str]]:
    out = [("Host", host)] if host is not None else []
    return [*out, *pairs]


def bearer(token: str, scheme: str = "Bearer") -> tuple[str, str]:
    return ("Authorization", f"{scheme} {token}")


def sign(claims: dict[str, object], key: bytes = SECRET, alg: str = "HS256") -> str:
    return jwt.encode(claims, key, algorithm=alg)


# --- loopback and listen policy (e1, e2) --------------------------------------------------------


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "127.9.8.7", "::1", "[::1]", "::ffff:127.0.0.1", "LOCALHOST"]
)
def test_loopback_hosts(host: str) -> None:
    assert auth.is_loopback_host(host, resolve=lambda _: ["127.0.0.1", "::1"])


@pytest.mark.parametrize(
    "host",
    [
        "0.0.0.0",
        "::",
        "[::]",
        "192.168.1.20",
        "10.0.0.1",
        "::ffff:10.0.0.1",
        "example.com",
        "128.0.0.1",
    ],
)
def test_non_loopback_hosts(host: str) -> None:
    assert not auth.is_loopback_host(host, resolve=lambda _: ["127.0.0.1"])


def test_localhost_must_resolve_only_to_loopback() -> None:
    assert not auth.is_loopback_host("localhost", resolve=lambda _: ["127.0.0.1", "192.168.1.5"])
    assert not auth.is_loopback_host("localhost", resolve=lambda _: [])

    def broken(_: str) -> list[str]:
        raise OSError("no resolver")

    assert not auth.is_loopback_host("localhost", resolve=broken)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20"])
def test_non_loopback_without_auth_refuses_to_start(host: str) -> None:
    with pytest.raises(UsageError, match="refusing to listen on non-loopback"):
        auth.check_listen(host, AuthPolicy())
    auth.check_listen(host, cap_policy())  # with auth it may


def test_loopback_without_auth_may_start() -> None:
    auth.check_listen("127.0.0.1", AuthPolicy())


# --- flag parsing (§12.2 "flag misuse ⇒ startup error", e4, e13) -------------------------------


def test_no_flags_no_auth() -> None:
    assert auth.policy_from_flags(AuthFlags()).mode is None


def test_token_file_is_read_trimmed_and_hashed(tmp_path: Path) -> None:
    path = secret_file(tmp_path, f"  {TOKEN}\n")
    policy = auth.policy_from_flags(AuthFlags("capability-token", ws_token_file=path))
    assert policy.token_sha256 == hashlib.sha256(TOKEN.encode()).digest()
    assert TOKEN not in repr(policy)


def test_token_sha256_flag() -> None:
    digest = hashlib.sha256(TOKEN.encode()).hexdigest().upper()
    policy = auth.policy_from_flags(AuthFlags("capability-token", ws_token_sha256=digest))
    assert policy.token_sha256 == bytes.fromhex(digest)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (AuthFlags(ws_token_sha256="a" * 64), "requires `--ws-auth"),
        (AuthFlags(ws_shared_secret_file="/x"), "requires `--ws-auth"),
        (AuthFlags("capability-token"), "is required"),
        (
            AuthFlags("capability-token", ws_token_file="/a", ws_token_sha256="a" * 64),
            "mutually exclusive",
        ),
        (AuthFlags("capability-token", ws_token_sha256="abc"), "64-character hex"),
        (AuthFlags("capability-token", ws_token_sha256="g" * 64), "64-character hex"),
        (AuthFlags("capability-token", ws_token_sha256="a" * 64, ws_issuer="x"), "only applies to"),
        (AuthFlags("signed-bearer-token"), "--ws-shared-secret-file` is required"),
        (AuthFlags("signed-bearer-token", ws_token_sha256="a" * 64), "only applies to"),
        (AuthFlags("magic"), "unsupported --ws-auth mode"),
        (AuthFlags("capability-token", ws_token_file="relative/token"), "absolute path"),
        (AuthFlags("capability-token", ws_token_file="/nonexistent/token"), "cannot read"),
    ],
)
def test_flag_misuse_is_a_startup_error(flags: AuthFlags, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        auth.policy_from_flags(flags)


def test_empty_token_file_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is empty"):
        auth.policy_from_flags(
            AuthFlags("capability-token", ws_token_file=secret_file(tmp_path, " \n"))
        )


def test_world_readable_and_symlinked_secret_files_refused(tmp_path: Path) -> None:
    readable = secret_file(tmp_path, TOKEN, mode=0o644)
    with pytest.raises(UsageError, match="chmod 600"):
        auth.policy_from_flags(AuthFlags("capability-token", ws_token_file=readable))
    target = secret_file(tmp_path, TOKEN, name="real")
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(UsageError, match="symlink"):
        auth.policy_from_flags(AuthFlags("capability-token", ws_token_file=str(link)))


def test_short_shared_secret_refused(tmp_path: Path) -> None:
    path = secret_file(tmp_path, b"x" * 31)
    with pytest.raises(UsageError, match="at least 32 bytes"):
        auth.policy_from_flags(AuthFlags("signed-bearer-token", ws_shared_secret_file=path))


def test_jwt_flags(tmp_path: Path) -> None:
    path = secret_file(tmp_path, SECRET + b"\n")
    policy = auth.policy_from_flags(
        AuthFlags(
            "signed-bearer-token",
            ws_shared_secret_file=path,
            ws_issuer="iss",
            ws_audience="aud",
            ws_max_clock_skew_seconds="5",
        )
    )
    assert (policy.secret, policy.issuer, policy.audience, policy.skew_s) == (
        SECRET,
        "iss",
        "aud",
        5,
    )
    assert (
        auth.policy_from_flags(AuthFlags("signed-bearer-token", ws_shared_secret_file=path)).skew_s
        == 30
    )
    for bad in ("-1", "x"):
        with pytest.raises(UsageError, match="non-negative integer"):
            auth.policy_from_flags(
                AuthFlags(
                    "signed-bearer-token", ws_shared_secret_file=path, ws_max_clock_skew_seconds=bad
                )
            )


# --- bearer header (e3) ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        ((), auth.MISSING_TOKEN),
        ((("Authorization", "Bearer"),), auth.INVALID_HEADER),
        ((("Authorization", "Bearer "),), auth.INVALID_HEADER),
        ((("Authorization", ""),), auth.INVALID_HEADER),
        ((("Authorization", f"Basic {TOKEN}"),), auth.INVALID_HEADER),
        ((bearer(TOKEN), bearer(TOKEN)), auth.INVALID_HEADER),
        ((("Authorization", "Bearer t\u00e9ken"),), auth.INVALID_HEADER),
        ((bearer("wrong"),), auth.INVALID_TOKEN),
        ((bearer(TOKEN + "x"),), auth.INVALID_TOKEN),
    ],
)
def test_capability_token_rejections(pairs: tuple[tuple[str, str], ...], message: str) -> None:
    assert check_request(headers(*pairs), cap_policy(), allowed_hosts=HOSTS, now=NOW) == Rejection(
        401, message
    )


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_capability_token_accepted_scheme_case_insensitive(scheme: str) -> None:
    assert (
        check_request(headers(bearer(TOKEN, scheme)), cap_policy(), allowed_hosts=HOSTS, now=NOW)
        == FULL_GRANT
    )


def test_no_auth_configured_needs_no_token() -> None:
    assert check_request(headers(), AuthPolicy(), allowed_hosts=HOSTS, now=NOW) == FULL_GRANT


# --- JWT (e4, e8) ------------------------------------------------------------------------------


def jwt_check(token: str, policy: AuthPolicy | None = None, now: float = NOW) -> Rejection | Grant:
    return check_request(
        headers(bearer(token)), policy or jwt_policy(), allowed_hosts=HOSTS, now=now
    )


def test_valid_jwt_accepted() -> None:
    assert jwt_check(sign({"exp": NOW + 60})) == FULL_GRANT
    assert (
        jwt_check(
            sign({"exp": NOW + 60, "nbf": NOW - 1, "iss": "me", "aud": "app"}),
            jwt_policy(issuer="me", audience="app"),
        )
        == FULL_GRANT
    )
    assert (
        jwt_check(sign({"exp": NOW + 60, "aud": ["other", "app"]}), jwt_policy(audience="app"))
        == FULL_GRANT
    )


def test_expiry_respects_skew() -> None:
    token = sign({"exp": NOW - 10})
    assert jwt_check(token) == FULL_GRANT  # within the 30 s skew
    assert jwt_check(token, now=NOW + 21) == Rejection(
        401, auth.EXPIRED_JWT
    )  # e8 replay after exp+skew
    assert jwt_check(token, jwt_policy(skew_s=0)) == Rejection(401, auth.EXPIRED_JWT)


def test_nbf_in_future_rejected_beyond_skew() -> None:
    assert jwt_check(sign({"exp": NOW + 600, "nbf": NOW + 20})) == FULL_GRANT
    assert jwt_check(sign({"exp": NOW + 600, "nbf": NOW + 31})) == Rejection(401, auth.INVALID_JWT)


@pytest.mark.parametrize(
    ("claims", "policy_kw"),
    [
        ({"sub": "x"}, {}),  # missing exp
        ({"exp": "soon"}, {}),
        ({"exp": True}, {}),
        ({"exp": NOW + 60, "iss": "evil"}, {"issuer": "me"}),
        ({"exp": NOW + 60}, {"issuer": "me"}),
        ({"exp": NOW + 60, "aud": "evil"}, {"audience": "app"}),
        ({"exp": NOW + 60, "aud": ["evil", "x"]}, {"audience": "app"}),
        ({"exp": NOW + 60}, {"audience": "app"}),
    ],
)
def test_bad_claims_rejected(claims: dict[str, object], policy_kw: dict[str, object]) -> None:
    assert jwt_check(sign(claims), jwt_policy(**policy_kw)) == Rejection(401, auth.INVALID_JWT)


def test_wrong_key_tampered_alg_none_and_garbage_rejected() -> None:
    assert jwt_check(sign({"exp": NOW + 60}, key=b"k" * 32)) == Rejection(401, auth.INVALID_JWT)
    good = sign({"exp": NOW + 60, "sub": "alice"})
    head, payload, sig = good.split(".")
    forged = jwt.utils.base64url_encode(b'{"exp":%d,"sub":"admin"}' % int(NOW + 60)).decode()
    assert jwt_check(f"{head}.{forged}.{sig}") == Rejection(401, auth.INVALID_JWT)
    none_head = jwt.utils.base64url_encode(b'{"alg":"none","typ":"JWT"}').decode()
    assert jwt_check(f"{none_head}.{payload}.") == Rejection(401, auth.INVALID_JWT)
    hs512 = sign({"exp": NOW + 60}, key=SECRET * 2, alg="HS512")
    assert jwt_check(hs512, AuthPolicy("signed-bearer-token", secret=SECRET * 2)) == Rejection(
        401, auth.INVALID_JWT
    )
    assert jwt_check("not.a.jwt") == Rejection(401, auth.INVALID_JWT)


def test_real_clock_is_not_needed() -> None:
    # Claims are judged against the `now` passed in, so the checks are exact and testable.
    token = sign({"exp": time.time() + 3600})
    assert jwt_check(token, now=time.time()) == FULL_GRANT


# --- Origin (e6) and Host (e7) -----------------------------------------------------------------


@pytest.mark.parametrize("origin", ["https://evil.example", "null", "file://", ""])
def test_origin_without_auth_forbidden(origin: str) -> None:
    assert check_request(
        headers(("Origin", origin)), AuthPolicy(), allowed_hosts=HOSTS, now=NOW
    ) == Rejection(403, auth.ORIGIN_FORBIDDEN)


@pytest.mark.parametrize("origin", ["https://evil.example", "null"])
def test_origin_with_valid_bearer_allowed_and_with_bad_bearer_forbidden(origin: str) -> None:
    policy = cap_policy()
    assert (
        check_request(
            headers(("Origin", origin), bearer(TOKEN)), policy, allowed_hosts=HOSTS, now=NOW
        )
        == FULL_GRANT
    )
    assert (
        check_request(
            headers(("Origin", origin), bearer("nope")), policy, allowed_hosts=HOSTS, now=NOW
        ).status
        == 403
    )
    assert (
        check_request(headers(("Origin", origin)), policy, allowed_hosts=HOSTS, now=NOW).status
        == 403
    )


@pytest.mark.parametrize(
    "host", ["127.0.0.1:8123", "localhost:8123", "LOCALHOST:8123", "[::1]:8123"]
)
def test_host_allowlist_accepts_loopback_names(host: str) -> None:
    assert check_request(headers(host=host), AuthPolicy(), allowed_hosts=HOSTS, now=NOW) == FULL_GRANT


@pytest.mark.parametrize(
    "host", ["rebind.evil.example:8123", "127.0.0.1:9999", "127.0.0.1", "evil.example", None]
)
def test_dns_rebinding_host_forbidden(host: str | None) -> None:
    assert check_request(
        headers(host=host), AuthPolicy(), allowed_hosts=HOSTS, now=NOW
    ) == Rejection(403, auth.HOST_FORBIDDEN)


def test_host_checked_before_auth_and_two_hosts_forbidden() -> None:
    pairs = [("Host", "127.0.0.1:8123"), ("Host", "evil:8123"), bearer(TOKEN)]
    assert check_request(pairs, cap_policy(), allowed_hosts=HOSTS, now=NOW) == Rejection(
        403, auth.HOST_FORBIDDEN
    )


def test_wildcard_bind_has_no_host_allowlist() -> None:
    assert auth.allowed_host_headers("0.0.0.0", 80) is None
    assert auth.allowed_host_headers("::", 80) is None
    assert auth.allowed_host_headers("::1", 80) == frozenset(
        {"[::1]:80", "localhost:80", "127.0.0.1:80", "[::1]", "localhost", "127.0.0.1"}
    )


def test_secret_files_are_not_world_readable_by_default_umask(tmp_path: Path) -> None:
    # A file created with the common 022 umask is refused: the operator must chmod it.
    old = os.umask(0o022)
    try:
        path = tmp_path / "t"
        path.write_text(TOKEN)
    finally:
        os.umask(old)
    with pytest.raises(UsageError):
        auth.policy_from_flags(AuthFlags("capability-token", ws_token_file=str(path)))
