"""tether's HTTP/1.1 client against raw loopback servers: framing, faults, TLS and proxies.

Each server is an asyncio handler that writes exactly the bytes under test, so every framing
(chunked split anywhere, Content-Length, close-delimited), every fault (cut, stall, garbage) and
the proxy hop are real sockets, not mocks.
"""

from __future__ import annotations

import asyncio
import gzip
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tether.providers import transport
from tether.providers.transport import BadTarget, Broken, ConnectFailed, TimedOut, stream_post

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
NO_PROXY_ENV: dict[str, str] = {}


@asynccontextmanager
async def serve(handler: Handler, *, tls: ssl.SSLContext | None = None) -> AsyncIterator[str]:
    async def guarded(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(guarded, "127.0.0.1", 0, ssl=tls)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    finally:
        server.close()


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return head, await reader.readexactly(length)


def answering(*pieces: bytes, pause_s: float = 0.0) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            if pause_s:
                await asyncio.sleep(pause_s)

    return handler


async def fetch(
    url: str, *, timeout_s: float | None = 5.0, env: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    async with stream_post(
        url + "/v1/x?y=1",
        {"x-api-key": "k"},
        b'{"a":1}',
        timeout_s=timeout_s,
        env=NO_PROXY_ENV if env is None else env,
    ) as response:
        body = b"".join([piece async for piece in response.iter_bytes()])
        return response.status, response.headers, body


def run(handler: Handler, **kw: object) -> tuple[int, dict[str, str], bytes]:
    async def main() -> tuple[int, dict[str, str], bytes]:
        async with serve(handler) as url:
            return await fetch(url, **kw)  # type: ignore[arg-type]

    return asyncio.run(main())


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"


def test_chunked_body_split_anywhere_is_reassembled() -> None:
    body = b"data: one\n\n" * 20
    framed = b"".join(
        b"%x\r\n%s\r\n" % (len(body[i : i + 13]), body[i : i + 13]) for i in range(0, len(body), 13)
    )
    wire = HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + framed + b"0\r\nX-Trailer: t\r\n\r\n"
    pieces = [wire[i : i + 5] for i in range(0, len(wire), 5)]  # chunk headers split too
    status, headers, got = run(answering(*pieces))
    assert (status, got) == (200, body)
    assert headers["content-type"] == "text/event-stream"


def test_content_length_and_close_delimited_bodies() -> None:
    assert run(answering(HEAD + b"Content-Length: 5\r\n\r\nhello"))[2] == b"hello"
    assert run(answering(HEAD + b"\r\n", b"until ", b"close"))[2] == b"until close"


def test_interim_100_continue_is_skipped_and_headers_are_case_insensitive() -> None:
    wire = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nX-A: 1\r\nx-a: 2\r\nContent-Length: 2\r\n\r\n{}"
    status, headers, body = run(answering(wire))
    assert (status, body) == (429, b"{}")
    assert headers["retry-after"] == "3" and headers["x-a"] == "1, 2"


def test_gzip_answer_is_decoded() -> None:
    data = gzip.compress(b"data: zipped\n\n")
    status, _, body = run(
        answering(
            HEAD + b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data)
        )
    )
    assert body == b"data: zipped\n\n"


def test_request_carries_method_target_headers_and_body() -> None:
    seen: list[tuple[bytes, bytes]] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await read_request(reader))
        writer.write(HEAD + b"Content-Length: 0\r\n\r\n")

    run(handler)
    head, body = seen[0]
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /v1/x?y=1 HTTP/1.1"
    assert "x-api-key: k" in lines and "content-length: 7" in lines
    assert not any(line.startswith("connection:") for line in lines)  # HTTP/1.1 persists
    assert any(line.startswith("host: 127.0.0.1:") for line in lines)
    assert body == b'{"a":1}'


def test_keep_alive_can_be_turned_off() -> None:
    seen: list[tuple[bytes, bytes]] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await read_request(reader))
        writer.write(HEAD + b"Content-Length: 0\r\n\r\n")

    run(handler, env={"TETHER_HTTP_KEEPALIVE": "off"})
    assert "connection: close" in seen[0][0].decode().split("\r\n")


@pytest.mark.parametrize(
    "wire, match",
    [
        (HEAD + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhel", "mid-response"),
        (HEAD + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", "chunked body unfinished"),
        (HEAD + b"Content-Length: 10\r\n\r\nhello", "5 bytes before the end"),
        (HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", "invalid chunk size"),
        (b"SSH-2.0-OpenSSH_9\r\n\r\n", "did not answer in HTTP/1.x"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed header"),
        (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n",
            "middle of the response headers",
        ),
        (b"", "without answering"),
        (HEAD + b"Content-Encoding: br\r\n\r\nxx", "cannot decode"),
    ],
)
def test_broken_answers_are_errors_never_short_successes(wire: bytes, match: str) -> None:
    with pytest.raises(Broken, match=match):
        run(answering(wire))


def test_oversized_headers_are_refused() -> None:
    with pytest.raises(Broken, match="exceed 64 KiB"):
        run(answering(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n"))


def test_a_stalled_body_times_out_per_read() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(HEAD + b"\r\ndata: first\n\n")
        await writer.drain()
        await asyncio.sleep(5)

    with pytest.raises(TimedOut, match="reading the response"):
        run(handler, timeout_s=0.3)


def test_a_slow_but_steady_body_does_not_time_out() -> None:
    # Each read has its own deadline, as httpx's read timeout: 6 pieces 0.1 s apart under 0.3 s.
    status, _, body = run(answering(HEAD + b"\r\n", *[b"x"] * 6, pause_s=0.1), timeout_s=0.3)
    assert body == b"xxxxxx"


def test_refused_connection_is_connect_failed_and_retryable() -> None:
    async def main() -> None:
        async with serve(answering()) as url:
            pass  # closed again: nothing listens on the port now
        await fetch(url)

    with pytest.raises(ConnectFailed) as info:
        asyncio.run(main())
    assert info.value.retryable


@pytest.mark.parametrize(
    "url, match",
    [
        ("ftp://127.0.0.1/x", "scheme must be http or https"),
        ("http://127.0.0.1:99999", "out of range"),
        ("http:///nohost", "names no host"),
    ],
)
def test_unusable_urls_are_bad_targets(url: str, match: str) -> None:
    with pytest.raises(BadTarget, match=match):
        asyncio.run(fetch(url))


def test_header_with_line_break_is_refused_before_sending() -> None:
    async def main() -> None:
        async with stream_post(
            "http://127.0.0.1:9/x", {"x-api-key": "sk\r\nX-Evil: 1"}, b"", timeout_s=1, env={}
        ):
            pass

    with pytest.raises(BadTarget, match="x-api-key.*line break"):
        asyncio.run(main())


# --- TLS -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("openssl is needed to make the test certificate (apt-get install -y openssl)")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def server_tls(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    return context


def test_https_verifies_against_ssl_cert_file(certificate: tuple[Path, Path]) -> None:
    async def main() -> tuple[int, dict[str, str], bytes]:
        async with serve(
            answering(HEAD + b"Content-Length: 2\r\n\r\nok"), tls=server_tls(certificate)
        ) as url:
            return await fetch(url, env={"SSL_CERT_FILE": str(certificate[0])})

    assert asyncio.run(main())[2] == b"ok"


def test_https_with_an_unknown_ca_fails_clearly_and_is_not_retried(
    certificate: tuple[Path, Path],
) -> None:
    async def main() -> None:
        async with serve(answering(HEAD + b"\r\n"), tls=server_tls(certificate)) as url:
            await fetch(url, env={})

    with pytest.raises(ConnectFailed, match="could not be verified.*SSL_CERT_FILE") as info:
        asyncio.run(main())
    assert not info.value.retryable


# --- proxies ---------------------------------------------------------------------------------


@asynccontextmanager
async def connect_proxy(log: list[bytes]) -> AsyncIterator[str]:
    """A real forward proxy: CONNECT tunnels bytes both ways; other requests are answered here."""

    async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        finally:  # also when cancelled: the client may keep its end open in its pool
            dst.close()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        log.append(head)
        method, target, _ = head.split(b"\r\n", 1)[0].split(b" ")
        if method != b"CONNECT":
            await reader.readexactly(7)
            writer.write(HEAD + b"Content-Length: 9\r\n\r\nvia proxy")
            return
        host, port = target.rsplit(b":", 1)
        up_reader, up_writer = await asyncio.open_connection(host.decode(), int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async with serve(handler) as url:
        yield url


def test_https_goes_through_a_connect_tunnel_with_proxy_auth(
    certificate: tuple[Path, Path],
) -> None:
    log: list[bytes] = []

    async def main() -> bytes:
        async with (
            serve(
                answering(HEAD + b"Content-Length: 6\r\n\r\nsecret"), tls=server_tls(certificate)
            ) as url,
            connect_proxy(log) as proxy,
        ):
            env = {
                "HTTPS_PROXY": proxy.replace("http://", "http://u%40x:p@"),
                "SSL_CERT_FILE": str(certificate[0]),
            }
            return (await fetch(url, env=env))[2]

    assert asyncio.run(main()) == b"secret"
    assert log[0].startswith(b"CONNECT 127.0.0.1:")
    assert b"proxy-authorization: Basic dUB4OnA=" in log[0]  # base64("u@x:p")


def test_plain_http_uses_the_absolute_form_and_no_proxy_bypasses() -> None:
    log: list[bytes] = []

    async def main() -> tuple[bytes, bytes]:
        async with (
            serve(answering(HEAD + b"Content-Length: 6\r\n\r\ndirect")) as url,
            connect_proxy(log) as proxy,
        ):
            proxied = (await fetch("http://example.invalid:8080", env={"http_proxy": proxy}))[2]
            direct = (
                await fetch(url, env={"http_proxy": proxy, "NO_PROXY": "localhost,127.0.0.1"})
            )[2]
            return proxied, direct

    proxied, direct = asyncio.run(main())
    assert proxied == b"via proxy" and direct == b"direct"
    assert log[0].startswith(b"POST http://example.invalid:8080/v1/x?y=1 HTTP/1.1")
    assert len(log) == 1


@pytest.mark.parametrize(
    "no_proxy, host, bypass",
    [
        ("*", "api.anthropic.com", True),
        ("anthropic.com", "api.anthropic.com", True),
        (".anthropic.com", "api.anthropic.com", True),
        ("anthropic.com", "notanthropic.com", False),
        ("api.anthropic.com:8443", "api.anthropic.com", False),  # port differs (443)
        ("10.0.0.0/8", "10.2.3.4", True),
        ("10.0.0.0/8", "11.2.3.4", False),
        ("", "api.anthropic.com", False),
    ],
)
def test_no_proxy_matching(no_proxy: str, host: str, bypass: bool) -> None:
    target = transport.urlsplit(f"https://{host}/v1")
    env = {"https_proxy": "http://proxy:3128", "no_proxy": no_proxy}
    assert (transport.proxy_for(target, env) is None) is bypass


def test_socks_proxy_is_refused_with_a_clear_error() -> None:
    with pytest.raises(BadTarget, match="only http:// proxies"):
        transport.proxy_for(
            transport.urlsplit("https://api.openai.com"), {"ALL_PROXY": "socks5://127.0.0.1:1080"}
        )
