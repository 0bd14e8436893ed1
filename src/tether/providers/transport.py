"""One streaming HTTP/1.1 POST over asyncio streams: all the HTTP tether needs to reach a provider.

Why not httpx: importing httpx + httpcore + anyio costs ~40 ms of the 250 ms budget of a
headless turn, and tether makes one request at a time per conversation. What this covers, as
httpx did for us:

- `http` and `https` URLs; TLS verified against `SSL_CERT_FILE` / `SSL_CERT_DIR` when set, else
  certifi's bundle when installed, else the system store; ALPN `http/1.1`.
- Proxies from `https_proxy` / `http_proxy` / `all_proxy` (lower case first, then upper case)
  and `no_proxy` (`*`, host or domain suffix, `host:port`, CIDR): https through a CONNECT
  tunnel, http in absolute form; `user:pass@` in the proxy URL becomes Proxy-Authorization.
- Bodies framed by `Transfer-Encoding: chunked`, `Content-Length`, or the connection closing;
  gzip/deflate decoded if a server compresses although asked not to (`framing.py`).
- Keep-alive: connections are pooled per origin (`pool.py`) and reused once an answer was read
  to its end; `TETHER_HTTP_KEEPALIVE=0` sends `connection: close` instead. A request goes out
  again only when the server provably did not read it (see `stream_post`).
- One deadline per phase (connect incl. TLS and proxy, each write, each read), like
  `httpx.Timeout(t)`; `None` waits forever.

Errors form a small tree (defined in `framing.py`), mapped onto tether's provider errors by
`providers/http.py`:

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
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from typing import Any
from urllib.parse import SplitResult, unquote, urlsplit

from tether.providers import pool as pooling
from tether.providers.framing import (
    MAX_HEAD,
    BadTarget,
    Broken,
    ConnectFailed,
    Response,
    TimedOut,
    TransportError,
    keep_alive_hint_s,
    persistent,
    read_head,
)

__all__ = [
    "BadTarget",
    "Broken",
    "ConnectFailed",
    "Response",
    "TimedOut",
    "TransportError",
    "proxy_for",
    "stream_post",
]

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # an HTTP header name (RFC 9110 token)
# What may follow the terminal event before a connection is given up rather than reused.
_DRAIN_LIMIT = 64 * 1024
_DRAIN_S = 0.25
_KEEPALIVE_OFF = ("0", "false", "off", "no")


def keep_alive_enabled(env: Mapping[str, str]) -> bool:
    """`TETHER_HTTP_KEEPALIVE=0|false|off|no` turns connection reuse off."""
    return env.get("TETHER_HTTP_KEEPALIVE", "").strip().lower() not in _KEEPALIVE_OFF


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
    """POST `content` to `url`; yields the response once its head arrived, the body unread.

    With keep-alive the connection returns to the pool when the block ends after the whole body
    was read (a short remainder is drained); an exception or a cancel (abort) closes it.

    No request is sent twice unless the server provably did not read it: a pooled connection
    found closed before writing is replaced (nothing was sent), and one reset by the server
    while sending or before any byte of answer is replaced once (a reset means our bytes hit a
    closed socket). An orderly close before any answer on a reused connection is an error that
    says so, not retryable: the server may have acted on the request.
    """
    env = os.environ if env is None else env
    target = _parse_url(url, "URL")
    proxy = proxy_for(target, env)
    absolute = proxy is not None and target.scheme == "http"  # plain http goes via the proxy
    keep = keep_alive_enabled(env)
    request = _request_head(
        target, headers, len(content), absolute=absolute, user_agent=user_agent, keep_alive=keep
    )
    pool = await pooling.for_running_loop()  # with keep-alive off, for its TLS sessions only
    origin = _origin(target, proxy, env)
    conn: pooling.Connection | None = None
    for fresh_only in (False, True):
        conn = pool.take(origin) if keep and not fresh_only else None
        if conn is None:
            conn = await _connect(target, proxy, timeout_s, env, origin, pool)
        try:
            await _send(conn, request + content, timeout_s)
            version, status, reason, response_headers = await read_head(conn.reader, timeout_s)
            break
        except Broken as exc:
            conn.abort()
            if conn.reused and exc.reset and not fresh_only:
                continue  # the server closed that connection before reading the request
            if conn.reused and exc.unanswered:
                raise Broken(
                    "the server closed a reused connection after the request was sent and "
                    "before answering; it may have been processed, so it was not sent again",
                    retryable=False,
                ) from None
            raise
        except BaseException:
            conn.abort()
            raise
    assert conn is not None
    response = Response(status, reason, response_headers, conn.reader, timeout_s)
    reusable = keep and persistent(version, response_headers)
    try:
        yield response
    except BaseException:
        # Abort or failure: reuse only a connection whose answer had already ended.
        _release(pool, conn, response_headers, reusable and response.complete)
        raise
    try:
        if reusable and not response.complete:
            with suppress(TransportError, TimeoutError):
                async with asyncio.timeout(_DRAIN_S):
                    await response.drain(_DRAIN_LIMIT)
    finally:  # a cancel while draining leaves the body unfinished: the connection is closed
        _release(pool, conn, response_headers, reusable and response.complete)


def _release(
    pool: pooling.Pool, conn: pooling.Connection, headers: Mapping[str, str], reuse: bool
) -> None:
    if not reuse:
        pool.forget(conn)
        return
    hint = keep_alive_hint_s(headers)
    # Leave a second's margin before the server's own idle close, so it never races a request.
    idle = pooling.IDLE_TIMEOUT_S if hint is None else min(pooling.IDLE_TIMEOUT_S, hint - 1.0)
    pool.give(conn, idle)


async def _send(conn: pooling.Connection, data: bytes, timeout_s: float | None) -> None:
    writer = conn.writer
    try:
        async with asyncio.timeout(timeout_s):
            writer.write(data)
            await writer.drain()
    except TimeoutError:
        raise TimedOut("sending the request") from None
    except ConnectionResetError as exc:
        raise Broken(
            f"the connection was reset while sending the request ({exc.strerror or exc})",
            reset=True,
        ) from None
    except OSError as exc:
        raise Broken(
            f"the connection closed while sending the request ({exc.strerror or exc})"
        ) from None


def _origin(
    target: SplitResult, proxy: SplitResult | None, env: Mapping[str, str]
) -> pooling.Origin:
    via = _authority(proxy, always_port=True) if proxy is not None else ""
    if proxy is not None and proxy.username is not None:
        via = f"{proxy.username}@{via}"
    return (
        target.scheme,
        (target.hostname or "").lower(),
        _port(target),
        via,
        env.get("SSL_CERT_FILE") or "",
        env.get("SSL_CERT_DIR") or "",
    )


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
    target: SplitResult,
    headers: Mapping[str, str],
    length: int,
    *,
    absolute: bool,
    user_agent: str,
    keep_alive: bool = True,
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
    }
    if not keep_alive:  # HTTP/1.1 connections persist unless a side says otherwise
        fields["connection"] = "close"
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
    target: SplitResult,
    proxy: SplitResult | None,
    timeout_s: float | None,
    env: Mapping[str, str],
    origin: pooling.Origin,
    pool: pooling.Pool | None,
) -> pooling.Connection:
    tls = target.scheme == "https"
    host = target.hostname or ""
    authority = _authority(target, always_port=True)
    hop = proxy or target
    where = f"proxy {hop.hostname}:{_port(hop)}" if proxy else authority
    direct_tls = tls and proxy is None
    context: Any = None
    if direct_tls:
        context = tls_context(env)
        session = pool.session(origin) if pool is not None else None
        if session is not None:
            context = _Resuming(context, session)
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(
                hop.hostname,
                _port(hop),
                limit=MAX_HEAD,
                ssl=context,
                server_hostname=host if direct_tls else None,
                happy_eyeballs_delay=0.25,
            )
            try:
                if proxy is not None and tls:
                    await _tunnel(reader, writer, proxy, authority)
                    await writer.start_tls(tls_context(env), server_hostname=host)
            except BaseException:
                writer.transport.abort()
                raise
    except TimeoutError:
        raise TimedOut(f"connecting to {where}") from None
    except TransportError:
        raise
    except OSError as exc:
        raise _connect_error(exc, where) from None
    return pooling.Connection(origin, reader, writer)


class _Resuming:
    """The client TLS context, offering a remembered session in the handshake: asyncio's TLS
    transport only calls `wrap_bio` on it, and SSLContext has no per-connection session."""

    def __init__(self, context: Any, session: Any) -> None:
        self._context = context
        self._session = session

    def wrap_bio(self, incoming: Any, outgoing: Any, **kw: Any) -> Any:
        return self._context.wrap_bio(incoming, outgoing, session=self._session, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


async def _tunnel(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, proxy: SplitResult, authority: str
) -> None:
    lines = [f"CONNECT {authority} HTTP/1.1", f"host: {authority}"]
    if proxy.username is not None:
        lines.append(f"proxy-authorization: {_basic(proxy)}")
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    await writer.drain()
    _, status, reason, _ = await read_head(reader, None)
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
