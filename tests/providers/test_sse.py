"""The SSE parser: WHATWG framing, and the same events whatever the chunking (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tether.providers.sse import SSEEvent, SSEParser


def parse(*pieces: bytes) -> list[SSEEvent]:
    parser = SSEParser()
    out: list[SSEEvent] = []
    for piece in pieces:
        out += parser.feed(piece)
    return out + parser.finish()


def test_fields_comments_multiline_and_crlf() -> None:
    raw = (
        b": keep-alive\r\n"
        b"event: content_block_delta\r\n"
        b"id: 7\r\n"
        b'data: {"a":\r\n'
        b"data:1}\r\n"
        b"\r\n"
        b"data:  two spaces\n\n"
        b"event: lonely\n\n"  # no data: not dispatched
        b"data: incomplete"  # no blank line before EOF: dropped
    )
    assert parse(raw) == [
        SSEEvent("content_block_delta", '{"a":\n1}', "7"),
        SSEEvent("message", " two spaces", "7"),
    ]


def test_bom_split_across_pieces_and_lone_cr_at_the_end() -> None:
    assert parse(b"\xef", b"\xbb\xbfdata: x\r", b"\r") == [SSEEvent("message", "x")]


def test_multibyte_utf8_split_between_pieces() -> None:
    raw = "data: h\u00e9llo \u2603\n\n".encode()
    assert parse(*[raw[i : i + 1] for i in range(len(raw))]) == [
        SSEEvent("message", "h\u00e9llo \u2603")
    ]


_line_text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=12
)
_events = st.lists(
    st.tuples(
        st.sampled_from([None, "message_start", "content_block_delta", "ping"]),
        st.lists(_line_text, min_size=1, max_size=3),
        st.booleans(),  # a comment line before the event
    ),
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(_events, st.sampled_from(["\n", "\r\n", "\r"]), st.lists(st.integers(0, 400), max_size=12))
def test_any_chunking_gives_the_same_events(
    events: list[tuple[str | None, list[str], bool]], newline: str, cuts: list[int]
) -> None:
    lines: list[str] = []
    expected: list[SSEEvent] = []
    for name, data, comment in events:
        if comment:
            lines.append(": ping")
        if name:
            lines.append(f"event: {name}")
        lines += [f"data: {d}" for d in data]
        lines.append("")
        expected.append(SSEEvent(name or "message", "\n".join(data)))
    raw = "".join(line + newline for line in lines).encode()
    bounds = sorted({min(c, len(raw)) for c in cuts})
    pieces = [raw[a:b] for a, b in zip([0, *bounds], [*bounds, len(raw)], strict=True)]
    assert parse(*pieces) == parse(raw) == expected
