"""Issue 14 / e4: signed bearer tokens whose time claims, header or size are not what they must
be are refused (401) — at the function and at a real upgrade — and never crash the check."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from pathlib import Path

import pytest

from tests.server.support import UPGRADE, InProcess, raw_http
from tether.server import auth

SECRET = b"j" * 32
POLICY = auth.AuthPolicy("signed-bearer-token", secret=SECRET)
FAR = 4_000_000_000  # a valid exp (2096)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def signed(payload: str, header: str = '{"alg":"HS256","typ":"JWT"}', key: bytes = SECRET) -> str:
    """A token whose JSON texts are exactly `header` and `payload` (NaN, 1e999 … included)."""
    signing_input = f"{_b64(header.encode())}.{_b64(payload.encode())}"
    sig = hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(sig)}"


HUGE = "1" + "0" * 400
BAD_TIME_CLAIMS = {
    "exp NaN": '{"exp": NaN}',
    "exp Infinity": '{"exp": Infinity}',
    "exp -Infinity": '{"exp": -Infinity}',
    "exp 1e999": '{"exp": 1e999}',
    "exp -1e999": '{"exp": -1e999}',
    "exp true": '{"exp": true}',
    "exp false": '{"exp": false}',
    "exp string": f'{{"exp": "{FAR}"}}',
    "exp null": '{"exp": null}',
    "exp list": f'{{"exp": [{FAR}]}}',
    "exp huge int": f'{{"exp": {HUGE}}}',
    "exp beyond year 9999": '{"exp": 253402300800}',
    "exp negative": '{"exp": -5}',
    "exp missing": '{"sub": "x"}',
    "nbf NaN": f'{{"exp": {FAR}, "nbf": NaN}}',
    "nbf Infinity": f'{{"exp": {FAR}, "nbf": Infinity}}',
    "nbf 1e999": f'{{"exp": {FAR}, "nbf": 1e999}}',
    "nbf huge int": f'{{"exp": {FAR}, "nbf": {HUGE}}}',
    "nbf true": f'{{"exp": {FAR}, "nbf": true}}',
    "nbf string": f'{{"exp": {FAR}, "nbf": "0"}}',
    "nbf future": f'{{"exp": {FAR}, "nbf": {FAR - 10}}}',
    "iat NaN": f'{{"exp": {FAR}, "iat": NaN}}',
    "iat -Infinity": f'{{"exp": {FAR}, "iat": -Infinity}}',
    "iat 1e999": f'{{"exp": {FAR}, "iat": 1e999}}',
    "iat huge int": f'{{"exp": {FAR}, "iat": {HUGE}}}',
    "iat false": f'{{"exp": {FAR}, "iat": false}}',
    "iat string": f'{{"exp": {FAR}, "iat": "x"}}',
    "iat future": f'{{"exp": {FAR}, "iat": {FAR - 10}}}',
    "payload not an object": "[1, 2]",
    "payload not JSON": "{exp: 1",
}

GOOD = signed(f'{{"exp": {FAR}}}')
BAD_TOKENS = {
    "alg none": signed(f'{{"exp": {FAR}}}', '{"alg":"none"}').rsplit(".", 1)[0] + ".",
    "alg none with a signature": signed(f'{{"exp": {FAR}}}', '{"alg":"none"}'),
    "alg HS512": signed(f'{{"exp": {FAR}}}', '{"alg":"HS512"}'),
    "alg RS256": signed(f'{{"exp": {FAR}}}', '{"alg":"RS256"}'),
    "alg lowercase": signed(f'{{"exp": {FAR}}}', '{"alg":"hs256"}'),
    "no alg": signed(f'{{"exp": {FAR}}}', '{"typ":"JWT"}'),
    "crit header": signed(f'{{"exp": {FAR}}}', '{"alg":"HS256","crit":["b64"],"b64":false}'),
    "header not JSON": signed(f'{{"exp": {FAR}}}', "{alg:HS256"),
    "header an array": signed(f'{{"exp": {FAR}}}', '["HS256"]'),
    "header a number": signed(f'{{"exp": {FAR}}}', "1e999"),
    "wrong key": signed(f'{{"exp": {FAR}}}', key=b"x" * 32),
    "tampered payload": GOOD.split(".")[0] + "." + _b64(f'{{"exp": {FAR + 1}}}'.encode()) + "."
    + GOOD.split(".")[2],
    "two segments": ".".join(GOOD.split(".")[:2]),
    "four segments": GOOD + ".AAAA",
    "bad base64": "%%%." + GOOD.split(".", 1)[1],
    "empty segments": "..",
    "oversized": signed(json.dumps({"exp": FAR, "pad": "x" * (auth.MAX_TOKEN_CHARS)})),
    "deeply nested payload": signed(f'{{"exp": {FAR}, "x": {"[" * 5000}{"]" * 5000}}}'),
}


@pytest.mark.parametrize("payload", BAD_TIME_CLAIMS.values(), ids=BAD_TIME_CLAIMS.keys())
def test_time_claims_that_are_not_timestamps_are_refused(payload: str) -> None:
    result = auth.verify_jwt(signed(payload), POLICY, time.time())
    assert isinstance(result, auth.Rejection) and result.status == 401, result


@pytest.mark.parametrize("token", BAD_TOKENS.values(), ids=BAD_TOKENS.keys())
def test_malformed_tokens_are_refused(token: str) -> None:
    result = auth.verify_jwt(token, POLICY, time.time())
    assert isinstance(result, auth.Rejection) and result.status == 401, result


def test_valid_time_claims_still_pass() -> None:
    now = time.time()
    for payload in (
        f'{{"exp": {FAR}}}',
        f'{{"exp": {FAR}.5, "nbf": {int(now) - 5}, "iat": {int(now)}}}',
        f'{{"exp": {int(now) - 10}}}',  # expired 10 s ago: within the 30 s skew
    ):
        assert auth.verify_jwt(signed(payload), POLICY, now) == auth.FULL_GRANT, payload
    expired = auth.verify_jwt(signed(f'{{"exp": {int(now) - 31}}}'), POLICY, now)
    assert expired == auth.Rejection(401, auth.EXPIRED_JWT)


def test_every_bad_token_gets_401_at_a_real_upgrade_and_the_server_keeps_serving(
    tmp_path: Path,
) -> None:
    cases = [*(signed(p) for p in BAD_TIME_CLAIMS.values()), *BAD_TOKENS.values()]

    async def scenario() -> None:
        async with InProcess(tmp_path, policy=POLICY) as srv:
            for token in cases:
                status, body = await raw_http(
                    srv.port, "GET /ws HTTP/1.1", {**UPGRADE, "Authorization": f"Bearer {token}"}
                )
                assert status in (401, 431, 400), (status, body, token[:60])
                assert token[:40] not in body  # the token is never echoed
            status, _ = await raw_http(
                srv.port, "GET /app-server-info HTTP/1.1", {"Authorization": f"Bearer {GOOD}"}
            )
            assert status == 200

    asyncio.run(scenario())
