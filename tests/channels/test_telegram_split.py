"""Telegram replies longer than the Bot API's 4096 characters go out in pieces."""

from __future__ import annotations

import pytest

from tether.channels.bundled.telegram import MAX_TEXT, split_text


@pytest.mark.parametrize("text", [
    "", "short", "x" * MAX_TEXT, "x" * (MAX_TEXT + 1), ("word " * 3000).strip(),
    ("line\n" * 2000), "a" * 10_000,
])
def test_pieces_fit_and_lose_nothing_but_the_cut_whitespace(text: str) -> None:
    parts = split_text(text)
    assert all(len(p) <= MAX_TEXT for p in parts)
    assert "".join(parts).replace(" ", "").replace("\n", "") == text.replace(" ", "").replace(
        "\n", "")
    assert len(parts) <= len(text) // (MAX_TEXT * 3 // 4) + 1  # no tiny pieces
