"""The watcher process behind Monitor's `ws` source: connect to a WebSocket and print what arrives.

Monitor runs it like any watcher command (`python -m tether.tools.ws_watch [--first] URL`), so
the connection is made inside the shell sandbox, in its own process group, and is killed at the
timeout like a `command` watcher. Each text message is one line on stdout (newlines inside a
message escaped), a binary one `<binary message: N bytes>`.

Exit codes: with `--first`, 0 once the first message has arrived, 1 when the socket closed
before any; without it (a `persistent` watch), 0 when the server closes the socket. 2: the
connection could not be made or broke.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

MAX_MESSAGE_BYTES = 1_000_000
OPEN_TIMEOUT_S = 10.0


def _line(message: str | bytes) -> str:
    if isinstance(message, bytes):
        return f"<binary message: {len(message)} bytes>"
    return message.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n")


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    first = "--first" in args
    urls = [a for a in args if a != "--first"]
    if len(urls) != 1 or not urls[0].startswith(("ws://", "wss://")):
        print("usage: python -m tether.tools.ws_watch [--first] ws://host[:port]/path", file=sys.stderr)
        return 2
    from websockets.exceptions import ConnectionClosed, ConnectionClosedOK, WebSocketException
    from websockets.sync.client import connect

    url = urls[0]
    seen = 0
    try:
        with connect(url, open_timeout=OPEN_TIMEOUT_S, max_size=MAX_MESSAGE_BYTES) as ws:
            print(f"[connected to {url}]", flush=True)
            for message in ws:
                seen += 1
                print(_line(message), flush=True)
                if first:
                    return 0
    except ConnectionClosedOK as exc:
        print(f"[closed by the server: {exc.rcvd.code if exc.rcvd else 1000}]", flush=True)
    except ConnectionClosed as exc:
        print(f"[connection lost: {exc}]", flush=True)
        return 2
    except (OSError, TimeoutError, WebSocketException) as exc:
        print(f"could not watch {url}: {exc}", file=sys.stderr, flush=True)
        return 2
    else:
        print("[closed by the server]", flush=True)
    return 1 if first and seen == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
