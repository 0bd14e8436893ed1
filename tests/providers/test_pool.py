"""Keep-alive connection reuse against real loopback servers: one connection per origin reused
across requests, replaced when stale, and never a request sent twice.

The servers are plain blocking sockets in a thread, so each test decides byte by byte what the
server reads, answers, and when and how it closes (an orderly FIN, or a reset with our request
unread), and counts connections and the requests it actually read.
"""

from __future__ import annotations

import asyncio
import select
import socket
import ssl
import struct
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from tether.providers import pool as pooling
from tether.providers.transport import Broken, stream_post
from tether.testing.fake_tls import self_signed_certificate, server_context

OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
SSE = b"data: one\n\n"
CHUNKED_BODY = b"%x\r\n%s\r\n0\r\n\r\n" % (len(SSE), SSE)


class Conn:
    """The server's end of one accepted connection."""

    def __init__(self, sock: socket.socket, server: RawServer) -> None:
        self.sock = sock
        self.server = server
        self.buffer = b""

    def read_request(self, timeout: float = 5.0) -> bytes | None:
        """One whole request (head + Content-Length body), recorded; None at EOF."""
        self.sock.settimeout(timeout)
        while b"\r\n\r\n" not in self.buffer:
            data = self.sock.recv(65536)
            if not data:
                return None
            self.buffer += data
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(rest) < length:
            rest += self.sock.recv(65536)
        self.buffer = rest[length:]
        request = head + b"\r\n\r\n" + rest[:length]
        with self.server.lock:
            self.server.requests.append((self.server.connections.index(self), rest[:length]))
        return request

    def answer(self, head: bytes = OK, body: bytes = CHUNKED_BODY) -> None:
        self.sock.sendall(head + body)

    def wait_readable(self, timeout: float = 5.0) -> None:
        select.select([self.sock], [], [], timeout)

    def close(self) -> None:
        """An orderly close: FIN."""
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()

    def reset(self) -> None:
        """An abortive close: RST, whatever was sent to us unread."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()


class RawServer:
    """Accepts connections; `scripts[n]` runs on the n-th one (the last script repeats)."""

    def __init__(self, *scripts: Callable[[Conn], None], tls: ssl.SSLContext | None = None) -> None:
        self.scripts = scripts
        self.tls = tls
        self.lock = threading.Lock()
        self.connections: list[Conn] = []
        self.requests: list[tuple[int, bytes]] = []  # (connection number, body) per request read
        self.resumed: list[bool] = []
        self.hangups: list[float] = []  # when a dribbling stream found the client gone
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.threads: list[threading.Thread] = []
        self.acceptor = threading.Thread(target=self._accept, daemon=True)
        self.acceptor.start()

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.listener.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(sock,), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _serve(self, sock: socket.socket) -> None:
        if self.tls is not None:
            try:
                sock = self.tls.wrap_socket(sock, server_side=True)
            except (OSError, ssl.SSLError):
                sock.close()
                return
            with self.lock:
                self.resumed.append(sock.session_reused)  # type: ignore[attr-defined]
        conn = Conn(sock, self)
        with self.lock:
            self.connections.append(conn)
            n = len(self.connections) - 1
        script = self.scripts[min(n, len(self.scripts) - 1)]
        try:
            script(conn)
        except OSError:
            pass
        finally:
            sock.close()

    def close(self) -> None:
        self.listener.close()
        for thread in self.threads:
            thread.join(5)


def keep_answering(conn: Conn) -> None:
    while conn.read_request() is not None:
        conn.answer()


async def post(url: str, env: dict[str, str] | None = None) -> bytes:
    async with stream_post(
        url + "/v1/messages", {}, b'{"n":1}', timeout_s=5.0, env=env or {}
    ) as response:
        return b"".join([piece async for piece in response.iter_bytes()])


def run_requests(server: RawServer, n: int, pause_s: float = 0.0, **kw: dict[str, str]) -> None:
    async def main() -> None:
        for _ in range(n):
            assert await post(server.url, **kw) == SSE
            await asyncio.sleep(pause_s)

    try:
        asyncio.run(main())
    finally:
        server.close()


def test_one_connection_serves_every_request_of_a_loop() -> None:
    server = RawServer(keep_answering)
    run_requests(server, 5)
    assert len(server.connections) == 1
    assert [c for c, _ in server.requests] == [0, 0, 0, 0, 0]


def test_keep_alive_off_opens_a_connection_per_request() -> None:
    server = RawServer(keep_answering)
    run_requests(server, 3, env={"TETHER_HTTP_KEEPALIVE": "0"})
    assert len(server.connections) == 3


def test_a_server_saying_connection_close_is_not_reused() -> None:
    def close_after_answer(conn: Conn) -> None:
        conn.read_request()
        conn.answer(OK.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))

    server = RawServer(close_after_answer)
    run_requests(server, 3)
    assert len(server.connections) == 3


def test_an_abandoned_body_closes_its_connection() -> None:
    """An answer not read to its end (an abort) never lends its connection to the next request."""

    def endless(conn: Conn) -> None:
        conn.read_request()
        conn.sock.sendall(OK)
        for _ in range(200):  # a stream still running when the client gives up
            conn.sock.sendall(b"%x\r\n%s\r\n" % (len(SSE), SSE))
        conn.read_request()  # EOF: the client closed it

    server = RawServer(endless, keep_answering)

    async def main() -> None:
        async with stream_post(server.url, {}, b"{}", timeout_s=5.0, env={}) as response:
            async for _ in response.iter_bytes():
                break  # abort after the first piece
        assert pooling.existing() is not None and pooling.existing().idle_count() == 0
        assert await post(server.url) == SSE

    try:
        asyncio.run(main())
    finally:
        server.close()
    assert len(server.connections) == 2


def test_a_short_remainder_after_the_last_event_is_drained_and_the_connection_kept() -> None:
    def split_terminator(conn: Conn) -> None:
        while conn.read_request() is not None:
            conn.sock.sendall(OK + b"%x\r\n%s\r\n" % (len(SSE), SSE))
            conn.sock.sendall(b"0\r\n\r\n")

    server = RawServer(split_terminator)

    async def main() -> None:
        for _ in range(3):
            async with stream_post(server.url, {}, b"{}", timeout_s=5.0, env={}) as response:
                async for piece in response.iter_bytes():
                    assert piece == SSE
                    break  # the caller stops at its terminal event, before the body's end

    try:
        asyncio.run(main())
    finally:
        server.close()
    assert len(server.connections) == 1


def test_an_idle_connection_the_server_closed_is_replaced_before_sending() -> None:
    """The server closes the idle connection (FIN): the next request goes out once, on a new
    connection; the closed one received nothing more."""
    leftovers: list[bytes] = []

    def answer_once_then_close(conn: Conn) -> None:
        conn.read_request()
        conn.answer()
        conn.sock.shutdown(socket.SHUT_WR)  # FIN, then see whether anything else arrives
        conn.sock.settimeout(1.0)
        try:
            leftovers.append(conn.sock.recv(65536))
        except OSError:
            leftovers.append(b"")

    server = RawServer(answer_once_then_close, keep_answering)
    run_requests(server, 2, pause_s=0.2)
    assert [c for c, _ in server.requests] == [0, 1]
    assert leftovers == [b""]


def test_a_request_read_then_unanswered_on_a_reused_connection_is_not_sent_again() -> None:
    def read_second_and_die(conn: Conn) -> None:
        conn.read_request()
        conn.answer()
        conn.read_request()  # the server has the whole request, then goes away without a word
        conn.close()

    server = RawServer(read_second_and_die, keep_answering)

    async def main() -> None:
        assert await post(server.url) == SSE
        with pytest.raises(Broken, match="may have been processed") as info:
            await post(server.url)
        assert not info.value.retryable
        await asyncio.sleep(0.2)

    try:
        asyncio.run(main())
    finally:
        server.close()
    assert [c for c, _ in server.requests] == [0, 0]
    assert len(server.connections) == 1


def test_a_reset_with_the_request_unread_is_sent_once_more_on_a_new_connection() -> None:
    """A reset before any answer means our bytes hit a closed socket: the server never read
    them, so one more attempt on a fresh connection cannot duplicate anything."""

    def reset_unread(conn: Conn) -> None:
        conn.read_request()
        conn.answer()
        conn.wait_readable()  # the second request has arrived; never read it
        conn.reset()

    server = RawServer(reset_unread, keep_answering)
    run_requests(server, 2)
    assert [c for c, _ in server.requests] == [0, 1]


def test_concurrent_requests_each_get_a_connection_and_the_pool_keeps_them() -> None:
    server = RawServer(keep_answering)

    async def main() -> None:
        await asyncio.gather(*(post(server.url) for _ in range(3)))
        pool = pooling.existing()
        assert pool is not None and pool.idle_count() == 3
        await asyncio.gather(*(post(server.url) for _ in range(3)))

    try:
        asyncio.run(main())
    finally:
        server.close()
    assert len(server.connections) == 3


def test_the_pool_is_closed_with_its_loop() -> None:
    ended = threading.Event()

    def answer_then_watch(conn: Conn) -> None:
        conn.read_request()
        conn.answer()
        if conn.read_request() is None:  # EOF: the client closed its pooled connection
            ended.set()

    server = RawServer(answer_then_watch)
    run_requests(server, 1)
    assert ended.wait(5)


def test_a_second_tls_connection_resumes_the_session(certificate: tuple[Path, Path]) -> None:
    tls = server_context(*certificate)

    def close_after_answer(conn: Conn) -> None:
        conn.read_request()
        conn.answer(OK.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))

    server = RawServer(close_after_answer, tls=tls)
    run_requests(server, 3, env={"SSL_CERT_FILE": str(certificate[0])})
    assert server.resumed == [False, True, True]


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed_certificate(tmp_path_factory.mktemp("tls"))


def dribbling(conn: Conn) -> None:
    """A stream that keeps going until the client hangs up; then answers on later requests."""
    conn.read_request()
    conn.sock.sendall(OK)
    try:
        while True:
            conn.sock.sendall(b"%x\r\n%s\r\n" % (len(SSE), SSE))
            time.sleep(0.02)
    except OSError:
        conn.server.hangups.append(time.monotonic())


@pytest.mark.parametrize("how", ["cancel", "aclose"])
def test_an_aborted_stream_closes_its_connection_at_once(how: str) -> None:
    server = RawServer(dribbling, keep_answering)

    async def consume(seen: asyncio.Event) -> None:
        async with stream_post(server.url, {}, b"{}", timeout_s=5.0, env={}) as response:
            async for _ in response.iter_bytes():
                seen.set()

    async def main() -> None:
        seen = asyncio.Event()
        if how == "cancel":  # a task cancelled mid-stream (Ctrl-C, an interrupt)
            task = asyncio.create_task(consume(seen))
            await seen.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        else:  # a consumer that stops iterating (aclose of the generator chain)
            gen = consume_gen()
            await gen.__anext__()
            await gen.aclose()
        pool = pooling.existing()
        assert pool is not None and pool.idle_count() == 0
        assert await post(server.url) == SSE

    async def consume_gen() -> AsyncIterator[bytes]:
        async with stream_post(server.url, {}, b"{}", timeout_s=5.0, env={}) as response:
            async for piece in response.iter_bytes():
                yield piece

    try:
        asyncio.run(main())
    finally:
        server.close()
    assert len(server.connections) == 2
    assert len(server.hangups) == 1  # the aborted stream's connection was closed


def test_connections_on_descriptors_past_1024_are_reused() -> None:
    """A busy App Server holds more than 1,024 descriptors; the idle check must still work."""
    import os
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    spare = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    server = RawServer(keep_answering)
    try:
        run_requests(server, 3)
    finally:
        for fd in spare:
            os.close(fd)
    assert len(server.connections) == 1


def test_a_cancel_while_draining_closes_the_connection() -> None:
    closed = threading.Event()

    def slow_terminator(conn: Conn) -> None:
        conn.read_request()
        conn.sock.sendall(OK + b"%x\r\n%s\r\n" % (len(SSE), SSE))
        time.sleep(1.0)  # the body's end trails the last event
        try:
            conn.sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass
        if conn.read_request() is None:
            closed.set()

    server = RawServer(slow_terminator)

    async def stop_at_first_event() -> None:
        async with stream_post(server.url, {}, b"{}", timeout_s=5.0, env={}) as response:
            async for _ in response.iter_bytes():
                break  # the caller is done; the transport drains (bounded) on the way out

    async def main() -> None:
        task = asyncio.create_task(stop_at_first_event())
        await asyncio.sleep(0.1)  # inside the drain now
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        pool = pooling.existing()
        assert pool is not None and pool.idle_count() == 0

    try:
        asyncio.run(main())
        assert closed.wait(5)
    finally:
        server.close()
