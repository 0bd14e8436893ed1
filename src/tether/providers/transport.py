"""One streaming HTTP/1.1 POST over asyncio streams: all the HTTP tether needs to reach a provider.

Why not httpx: importing httpx + httpcore + anyio costs ~40 ms of the 250 ms budget of a
headless turn, and tether only ever makes one request per connection per model step. What this
covers, as httpx did for us:

- `http` and `https` URLs; TLS verified against `SSL_CERT_FILE` / `SSL_CERT_DIR` when set, else
  certifi's bundle when installed, else the system store; ALPN `http/1.1`.
- Proxies from `https_proxy` / `http_proxy` / `all_proxy` (lower case first, then upper case)
  and `no_proxy` (`*`, host or domain suffix, `host:port`, CIDR): https through a CONNECT
  tunnel, http in absolute form; `user:pass@` in the proxy URL becomes Proxy-Authorization.
- Bodies framed by `Transfer-Encoding: chunked`, `Content-Length`, or the connection closing;
  gzip/deflate decoded if a server compresses although asked not to.
- One deadline per phase (connect incl. TLS and proxy, each write, each read), like
  `httpx.Timeout(t)`; `None` waits forever.

Errors form a small tree, mapped onto tether's provider errors by `providers/http.py`:

    TransportError
    ├── BadTarget       the URL, a header or the proxy setting cannot be used
    ├── ConnectFailed   no connection (refused, DNS, TLS verification, proxy refused CONNECT)
    ├── TimedOut        a phase passed its deadline
    └── Broken          the connection closed or sent garbage mid-response
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import asynccontextmanager, suppress
from typing import Any
from urllib.parse import SplitResult, unquote, urlsplit

_MAX_HEAD = 64 * 1024  # status line + headers
_MAX_ERROR_BODY = 1024 * 1024
_READ_SIZE = 64 * 1024
_CHUNKS_UNFINISHED = "the server closed the connection mid-response (chunked body unfinished)"
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # an HTTP header name (RFC 9110 token)


class TransportError(Exception):
    """A request that got no complete answer."""


class BadTarget(TransportError):
    """The URL, a header value or the proxy setting cannot be used to send a request."""


class ConnectFailed(TransportError):
    """No connection: refused, unresolvable, TLS verification failed, or a proxy refused."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class TimedOut(TransportError):
    """A phase (connect, write, read) passed its deadline."""

    def __init__(self, phase: str) -> None:
        super().__init__(f"{phase} timed out")
        self.phase = phase


class Broken(TransportError):
    """The connection closed, or sent something that is not HTTP, before the answer ended."""


class Response:
    """Status and lower-cased headers of an answer whose body is read as it arrives."""

    def __init__(
        self, status: int, reason: str, headers: dict[str, str], body: AsyncIterator[bytes]
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self._body = body

    def iter_bytes(self) -> AsyncIterator[bytes]:
        return self._body

    async def read(self, limit: int = _MAX_ERROR_BODY) -> bytes:
        """The whole body (an error answer), truncated at `limit` bytes."""
        parts: list[bytes] = []
        size = 0
        async for piece in self._body:
            parts.append(piece)
            size += len(piece)
            if size >= limit:
                break
        return b"".join(parts)[:limit]


@asynccontextmanager
async def stream_post(
    url: str,
    headers: Mapping[str, str],
    content: bytes,
    *,
    timeout_s: float | None,
    env: Mapping[str, str] | None = None,
    user_agent: str = "tether",
) -> AsyncIterator[Response]:
    """POST `content` to `url`; yields the response once its head arrived, the body unread."""
    env = os.environ if env is None else env
    target = _parse_url(url, "URL")
    proxy = proxy_for(target, env)
    absolute = proxy is not None and target.scheme == "http"  # plain http goes via the proxy
    request = _request_head(target, headers, len(content), absolute=absolute, user_agent=user_agent)
    reader, writer = await _connect(target, proxy, timeout_s, env)
    try:
        try:
            async with asyncio.timeout(timeout_s):
                writer.write(request + content)
                await _drain(writer)
        except TimeoutError:
            raise TimedOut("sending the request") from None
        status, reason, response_headers = await _read_head(reader, timeout_s)
        yield Response(status, reason, response_headers, _body(reader, response_headers, timeout_s))
    finally:
        await _close(writer)


# --- the target and its proxy --------------------------------------------------------------


def _parse_url(url: str, what: str) -> SplitResult:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise BadTarget(f"{what} {url!r} is not usable: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise BadTarget(f"{what} {url!r} is not usable: the scheme must be http or https")
    if not parts.hostname:
        raise BadTarget(f"{what} {url!r} is not usable: it names no host")
    if port == 0:
        raise BadTarget(f"{what} {url!r} is not usable: port 0")
    return parts


def _port(parts: SplitResult) -> int:
    return parts.port or (443 if parts.scheme == "https" else 80)


def _authority(parts: SplitResult, *, always_port: bool = False) -> str:
    """`host[:port]` as HTTP writes it (IPv6 in brackets); the port only when given, unless
    `always_port` (a CONNECT target)."""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = _port(parts) if always_port else parts.port
    return f"{host}:{port}" if port else host


def proxy_for(target: SplitResult, env: Mapping[str, str]) -> SplitResult | None:
    """The proxy a request to `target` goes through, from the environment (None: direct)."""
    names = (f"{target.scheme}_proxy", "all_proxy")
    raw = next(
        (v for name in names for v in (env.get(name), env.get(name.upper())) if v and v.strip()),
        None,
    )
    if raw is None or _bypassed(target, _env(env, "no_proxy")):
        return None
    raw = raw.strip()
    if "://" not in raw:
        raw = "http://" + raw  # `proxy:3128`, as curl reads it
    source = f"proxy setting {raw!r} (from {target.scheme.upper()}_PROXY or ALL_PROXY)"
    scheme = raw.partition("://")[0].lower()
    if scheme != "http":
        raise BadTarget(f"{source}: only http:// proxies are supported, not {scheme}://")
    return _parse_url(raw, source)


def _env(env: Mapping[str, str], name: str) -> str:
    return env.get(name) or env.get(name.upper()) or ""


def _bypassed(target: SplitResult, no_proxy: str) -> bool:
    host = (target.hostname or "").lower().rstrip(".")
    port = _port(target)
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if not entry:
            continue
        if entry == "*":
            return True
        if "/" in entry:
            if _in_network(host, entry):
                return True
            continue
        name, sep, entry_port = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
        if sep and entry_port != str(port):
            continue
        name = name.strip("[]").lstrip("*").lstrip(".").rstrip(".")
        if name and (host == name or host.endswith("." + name)):
            return True
    return False


def _in_network(host: str, cidr: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host) in ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return False


# --- the request ---------------------------------------------------------------------------


def _request_head(
    target: SplitResult, headers: Mapping[str, str], length: int, *, absolute: bool, user_agent: str
) -> bytes:
    path = target.path or "/"
    if target.query:
        path += "?" + target.query
    if absolute:
        path = f"{target.scheme}://{_authority(target)}{path}"
    fields = {
        "host": _authority(target),
        "user-agent": user_agent,
        "accept-encoding": "identity",
        "connection": "close",
    }
    if target.username is not None:
        fields["authorization"] = _basic(target)
    fields.update({name.lower(): value for name, value in headers.items()})
    fields["content-length"] = str(length)
    lines = [f"POST {path} HTTP/1.1"]
    for name, value in fields.items():
        if not _TOKEN.fullmatch(name):
            raise BadTarget(f"header name {name!r} is not a valid HTTP header name")
        if any(c in value for c in "\r\n\0"):
            raise BadTarget(
                f"header {name!r} contains a line break or NUL (check its value, e.g. the API key)"
            )
        lines.append(f"{name}: {value}")
    try:
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    except UnicodeEncodeError as exc:
        raise BadTarget(f"a request header has a character HTTP cannot carry: {exc}") from None


def _basic(parts: SplitResult) -> str:
    import base64

    user = unquote(parts.username or "")
    password = unquote(parts.password or "")
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


# --- the connection ------------------------------------------------------------------------


async def _connect(
    target: SplitResult, proxy: SplitResult | None, timeout_s: float | None, env: Mapping[str, str]
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    tls = target.scheme == "https"
    host = target.hostname or ""
    authority = _authority(target, always_port=True)
    hop = proxy or target
    where = f"proxy {hop.hostname}:{_port(hop)}" if proxy else authority
    direct_tls = tls and proxy is None
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(
                hop.hostname,
                _port(hop),
                limit=_MAX_HEAD,
                ssl=tls_context(env) if direct_tls else None,
                server_hostname=host if direct_tls else None,
                happy_eyeballs_delay=0.25,
            )
            if proxy is not None and tls:
                await _tunnel(reader, writer, proxy, authority)
                await writer.start_tls(tls_context(env), server_hostname=host)
    except TimeoutError:
        raise TimedOut(f"connecting to {where}") from None
    except TransportError:
        raise
    except OSError as exc:
        raise _connect_error(exc, where) from None
    return reader, writer


async def _tunnel(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, proxy: SplitResult, authority: str
) -> None:
    lines = [f"CONNECT {authority} HTTP/1.1", f"host: {authority}"]
    if proxy.username is not None:
        lines.append(f"proxy-authorization: {_basic(proxy)}")
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    await writer.drain()
    status, reason, _ = await _read_head(reader, None)
    if not 200 <= status < 300:
        raise ConnectFailed(
            f"proxy {proxy.hostname}:{_port(proxy)} refused to tunnel to {authority}: {status} {reason}".rstrip(),
            retryable=status >= 500,
        )


def _connect_error(exc: OSError, where: str) -> ConnectFailed:
    import ssl

    if isinstance(exc, ssl.SSLCertVerificationError):
        return ConnectFailed(
            f"the TLS certificate of {where} could not be verified ({exc.verify_message}); "
            "if a proxy or private CA signs it, point SSL_CERT_FILE at that CA bundle",
            retryable=False,
        )
    if isinstance(exc, ssl.SSLError):
        return ConnectFailed(f"TLS with {where} failed: {exc.reason or exc}", retryable=False)
    import socket

    if isinstance(exc, socket.gaierror):
        return ConnectFailed(f"cannot resolve {where.rsplit(':', 1)[0]}: {exc.strerror}")
    return ConnectFailed(f"{where}: {exc.strerror or exc}")


def tls_context(env: Mapping[str, str]) -> Any:
    """The verifying TLS client context for `env`'s CA settings (built once per setting)."""
    return _tls_context(env.get("SSL_CERT_FILE") or None, env.get("SSL_CERT_DIR") or None)


@functools.cache
def _tls_context(cafile: str | None, capath: str | None) -> Any:
    import ssl  # asyncio imports it anyway; building a context is what costs tens of ms

    if cafile is None and capath is None:
        try:
            import certifi
        except ImportError:
            pass
        else:
            cafile = certifi.where()
    try:
        context = ssl.create_default_context(cafile=cafile, capath=capath)
    except (OSError, ssl.SSLError) as exc:
        raise BadTarget(
            f"cannot load the CA certificates (SSL_CERT_FILE={cafile!r}, SSL_CERT_DIR={capath!r}): {exc}"
        ) from None
    context.set_alpn_protocols(["http/1.1"])
    return context


async def _drain(writer: asyncio.StreamWriter) -> None:
    try:
        await writer.drain()
    except OSError as exc:
        raise Broken(
            f"the connection closed while sending the request ({exc.strerror or exc})"
        ) from None


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with suppress(OSError, TimeoutError, asyncio.CancelledError):
        async with asyncio.timeout(1.0):
            await writer.wait_closed()
    writer.transport.abort()  # no-op once closed; stops a peer that never finishes TLS shutdown


# --- the response --------------------------------------------------------------------------


async def _read_head(
    reader: asyncio.StreamReader, timeout_s: float | None
) -> tuple[int, str, dict[str, str]]:
    while True:
        try:
            async with asyncio.timeout(timeout_s):
                raw = await reader.readuntil(b"\r\n\r\n")
        except TimeoutError:
            raise TimedOut("waiting for the response") from None
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:
                raise Broken("the server closed the connection without answering") from None
            raise Broken(
                "the server closed the connection in the middle of the response headers"
            ) from None
        except asyncio.LimitOverrunError:
            raise Broken(f"the response headers exceed {_MAX_HEAD // 1024} KiB") from None
        except OSError as exc:
            raise Broken(f"reading the response failed ({exc.strerror or exc})") from None
        status, reason, headers = _parse_head(raw)
        if status >= 200 or status == 101:
            return status, reason, headers
        # 1xx interim answers (100 Continue, 103 Early Hints) precede the real one


def _parse_head(raw: bytes) -> tuple[int, str, dict[str, str]]:
    text = raw.decode("latin-1")
    status_line, _, rest = text.partition("\r\n")
    version, _, tail = status_line.partition(" ")
    code, _, reason = tail.partition(" ")
    if not version.startswith("HTTP/1.") or not (code.isdigit() and len(code) == 3):
        raise Broken(f"the server did not answer in HTTP/1.x (status line {status_line[:80]!r})")
    headers: dict[str, str] = {}
    name = ""
    for line in rest.split("\r\n"):
        if not line:
            continue
        if line[0] in " \t" and name:  # obsolete line folding
            headers[name] += " " + line.strip()
            continue
        name, sep, value = line.partition(":")
        name = name.strip().lower()
        if not sep or not name:
            raise Broken(f"the server sent a malformed header line {line[:80]!r}")
        value = value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return int(code), reason.strip(), headers


async def _body(
    reader: asyncio.StreamReader, headers: Mapping[str, str], timeout_s: float | None
) -> AsyncIterator[bytes]:
    encoding = headers.get("content-encoding", "identity").strip().lower()
    decoder = _decoder(encoding)
    if "chunked" in headers.get("transfer-encoding", "").lower():
        pieces = _chunked(reader, timeout_s)
    elif "content-length" in headers:
        try:
            length = int(headers["content-length"].split(",")[0])
        except ValueError:
            raise Broken(
                f"the server sent an invalid Content-Length {headers['content-length']!r}"
            ) from None
        pieces = _sized(reader, length, timeout_s)
    else:
        pieces = _until_close(reader, timeout_s)
    async for piece in pieces:
        out = decoder.decompress(piece) if decoder is not None else piece
        if out:
            yield out
    if decoder is not None and (tail := decoder.flush()):
        yield tail


def _decoder(encoding: str) -> Any:
    if encoding in ("identity", ""):
        return None
    import zlib

    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompressobj()
    raise Broken(f"the server compressed its answer with {encoding!r}, which tether cannot decode")


async def _receive(op: Awaitable[bytes], timeout_s: float | None, *, cut: str) -> bytes:
    """One read of the body under its deadline, its failures as transport errors; `cut` says
    what an early end of the connection means here."""
    try:
        async with asyncio.timeout(timeout_s):
            return await op
    except TimeoutError:
        raise TimedOut("reading the response") from None
    except asyncio.IncompleteReadError:
        raise Broken(cut) from None
    except asyncio.LimitOverrunError:
        raise Broken("the server sent an overlong chunk header") from None
    except OSError as exc:
        raise Broken(f"the connection broke mid-response ({exc.strerror or exc})") from None


def _read(
    reader: asyncio.StreamReader, n: int, timeout_s: float | None, *, exact: bool = False
) -> Awaitable[bytes]:
    op = reader.readexactly(n) if exact else reader.read(n)
    return _receive(op, timeout_s, cut="the server closed the connection mid-response")


def _line(reader: asyncio.StreamReader, timeout_s: float | None) -> Awaitable[bytes]:
    return _receive(reader.readuntil(b"\r\n"), timeout_s, cut=_CHUNKS_UNFINISHED)


async def _chunked(reader: asyncio.StreamReader, timeout_s: float | None) -> AsyncIterator[bytes]:
    while True:
        size_line = (await _line(reader, timeout_s)).split(b";", 1)[0].strip()
        try:
            size = int(size_line, 16)
        except ValueError:
            raise Broken(f"the server sent an invalid chunk size {size_line[:20]!r}") from None
        if size == 0:
            while (await _line(reader, timeout_s)) != b"\r\n":
                pass  # trailer fields, unused
            return
        while size:
            piece = await _read(reader, min(size, _READ_SIZE), timeout_s)
            if not piece:
                raise Broken(_CHUNKS_UNFINISHED)
            size -= len(piece)
            yield piece
        if await _read(reader, 2, timeout_s, exact=True) != b"\r\n":
            raise Broken("the server sent a chunk longer than its declared size")


async def _sized(
    reader: asyncio.StreamReader, length: int, timeout_s: float | None
) -> AsyncIterator[bytes]:
    while length > 0:
        piece = await _read(reader, min(length, _READ_SIZE), timeout_s)
        if not piece:
            raise Broken(
                f"the server closed the connection {length} bytes before the end of the body"
            )
        length -= len(piece)
        yield piece


async def _until_close(
    reader: asyncio.StreamReader, timeout_s: float | None
) -> AsyncIterator[bytes]:
    while piece := await _read(reader, _READ_SIZE, timeout_s):
        yield piece
