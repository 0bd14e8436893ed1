"""The fake's Bedrock dialect: AWS event-stream frames around Anthropic stream events, and a
SigV4 check of each request made with botocore's own signer (as the real service would refuse a
bad signature, the fake answers 403).

The frame encoder is written here from the format (prelude with lengths and CRC32, typed headers,
payload, message CRC32) so that tether's decoder (botocore's parser) is tested against bytes it
did not produce. Script turn key beyond the common ones: `exception` (an exception frame type,
such as throttlingException, sent instead of the answer).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import struct
from typing import Any

from tether.testing.fake_dialects import NextId, Plan, anthropic_events

_AUTH = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/"
    r"(?P<service>[^/]+)/aws4_request, SignedHeaders=(?P<signed>[^,]+), Signature=(?P<sig>[0-9a-f]{64})"
)


def frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message; every header a string (type 7), as Bedrock sends them."""
    head = b"".join(
        struct.pack("B", len(n.encode()))
        + n.encode()
        + b"\x07"
        + struct.pack(">H", len(v.encode()))
        + v.encode()
        for n, v in headers.items()
    )
    total = 12 + len(head) + len(payload) + 4
    prelude = struct.pack(">II", total, len(head))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    body = prelude + head + payload
    return body + struct.pack(">I", binascii.crc32(body))


def chunk_frame(event: dict[str, Any]) -> bytes:
    inner = json.dumps(event, separators=(",", ":")).encode()
    payload = json.dumps({"bytes": base64.b64encode(inner).decode(), "p": "abcdefghij"}).encode()
    return frame(
        {":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"},
        payload,
    )


def exception_frame(kind: str, message: str) -> bytes:
    return frame(
        {
            ":exception-type": kind,
            ":content-type": "application/json",
            ":message-type": "exception",
        },
        json.dumps({"message": message}).encode(),
    )


def bedrock_frames(
    plan: Plan, body: dict[str, Any], next_id: NextId, turn: dict[str, Any]
) -> list[bytes]:
    if turn.get("exception"):
        return [exception_frame(str(turn["exception"]), "fake bedrock exception")]
    frames = []
    for sse in anthropic_events(plan, body, next_id):
        data = next(
            (line[6:] for line in sse.decode().splitlines() if line.startswith("data: ")), None
        )
        if data is None:
            continue
        event = json.loads(data)
        if event.get("type") == "ping":
            continue  # Bedrock does not forward pings
        if event.get("type") == "message_stop":
            event["amazon-bedrock-invocationMetrics"] = {
                "inputTokenCount": plan.usage_in, "outputTokenCount": plan.usage_out,
                "invocationLatency": 420, "firstByteLatency": 120,
            }  # fmt: skip
        frames.append(chunk_frame(event))
    return frames


def check_bedrock_body(body: dict[str, Any]) -> list[str]:
    problems = []
    if body.get("anthropic_version") != "bedrock-2023-05-31":
        problems.append("anthropic_version must be bedrock-2023-05-31")
    for key in ("model", "stream"):
        if key in body:
            problems.append(f"extraneous key [{key}] is not permitted")
    return problems


def verify_sigv4(
    method: str,
    url: str,
    headers: dict[str, str],
    body: bytes,
    secrets: dict[str, str],
    *,
    region: str,
    service: str = "bedrock",
) -> str | None:
    """None when the request's SigV4 signature is right (recomputed with botocore), else why not.

    `url` must carry the path exactly as it arrived; `headers` are lower-cased names.
    """
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    match = _AUTH.fullmatch(headers.get("authorization", ""))
    if match is None:
        return "no AWS4-HMAC-SHA256 authorization header"
    if match["key"] not in secrets:
        return f"unknown access key {match['key']}"
    if (match["region"], match["service"]) != (region, service):
        return f"signed for {match['region']}/{match['service']}, not {region}/{service}"
    amz_date = headers.get("x-amz-date", "")
    if amz_date[:8] != match["date"]:
        return "x-amz-date does not match the credential scope's date"
    signed = match["signed"].split(";")
    for required in ("host", "x-amz-date"):
        if required not in signed:
            return f"{required} is not signed"
    if "x-amz-security-token" in headers and "x-amz-security-token" not in signed:
        return "x-amz-security-token is not signed"
    request = AWSRequest(
        method=method, url=url, data=body, headers={h: headers[h] for h in signed if h in headers}
    )
    request.context["timestamp"] = amz_date
    token = headers.get("x-amz-security-token")
    auth = SigV4Auth(Credentials(match["key"], secrets[match["key"]], token), service, region)
    canonical = auth.canonical_request(request)
    expected = auth.signature(auth.string_to_sign(request, canonical), request)
    if auth.signed_headers(auth.headers_to_sign(request)) != match["signed"]:
        return "the signed header list does not match the headers sent"
    if expected != match["sig"]:
        return "signature mismatch"
    return None
