from __future__ import annotations

import stat
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tether.tools.globbing import GlobMatcher, split_literal_root
from tether.tools.output import (
    cap_text,
    cap_with_overflow,
    clean_program_output,
    secret_values,
    strip_ansi,
)


def test_strip_ansi_forms() -> None:
    assert strip_ansi("\x1b[1;32mok\x1b[0m") == "ok"
    assert strip_ansi("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\") == "link"
    assert strip_ansi("a\x1b[2Kb\x1b(Bc\x1b=d") == "abcd"


@given(st.text(alphabet=st.characters(blacklist_characters="\x1b\x9b")))
def test_strip_ansi_leaves_plain_text_alone(text: str) -> None:
    assert strip_ansi(text) == text


def test_secret_values_by_name_and_length() -> None:
    env = {
        "OPENAI_API_KEY": "sk-1234567890",
        "GITHUB_TOKEN": "ghp_abcdefgh",
        "my_password": "longenough",
        "SHORT_SECRET": "1234567",
        "PATH": "/usr/bin:/bin",
    }
    assert set(secret_values(env)) == {"sk-1234567890", "ghp_abcdefgh", "longenough"}
    text = clean_program_output("a sk-1234567890 b\r\nlongenough\n", secret_values(env))
    assert text == "a [redacted] b\n[redacted]\n"


def test_overlapping_secrets_redact_fully() -> None:
    secrets = secret_values({"A_KEY": "abcdefgh", "B_KEY": "abcdefgh-suffix"})
    assert clean_program_output("abcdefgh-suffix", secrets) == "[redacted]"


def test_cap_with_overflow_keeps_head_and_tail(tmp_path: Path) -> None:
    tmp_path = tmp_path / "overflow"
    text = "".join(f"{i}\n" for i in range(10_000))
    assert cap_with_overflow("short", overflow_dir=tmp_path, prefix="p-") == "short"
    capped = cap_with_overflow(text, limit=2000, overflow_dir=tmp_path, prefix="p-")
    assert len(capped) <= 2000
    assert capped.startswith("0\n1\n") and capped.endswith("9998\n9999\n")
    (saved,) = tmp_path.iterdir()
    assert str(saved) in capped
    assert saved.read_text() == text
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600


def test_cap_text_cuts_at_a_line_break() -> None:
    text = "\n".join("x" * 50 for _ in range(100))
    capped = cap_text(text, 500, "Narrow it.")
    assert len(capped) <= 500
    assert capped.endswith("[Output truncated at 500 characters. Narrow it.]")
    assert set(capped.split("\n\n")[0].split("\n")) == {"x" * 50}


def test_glob_matcher_semantics() -> None:
    name_only = GlobMatcher.compile("*.py")
    assert name_only.matches("a.py") and name_only.matches("deep/er/b.py")
    assert not name_only.matches("a.pyc")
    anchored = GlobMatcher.compile("src/*.py")
    assert anchored.matches("src/a.py") and not anchored.matches("src/x/a.py")
    assert not anchored.matches("lib/src/a.py")
    star2 = GlobMatcher.compile("**/test_*.py")
    assert star2.matches("test_a.py") and star2.matches("x/y/test_a.py")
    braces = GlobMatcher.compile("*.{ts,tsx}")
    assert braces.matches("a.ts") and braces.matches("a.tsx") and not braces.matches("a.t")
    klass = GlobMatcher.compile("file[0-9].[!c]*")
    assert klass.matches("file1.txt") and not klass.matches("file1.cfg")
    assert GlobMatcher.compile("a?c").matches("abc") and not GlobMatcher.compile("a?c").matches(
        "a/c"
    )


def test_split_literal_root() -> None:
    base = Path("/base")
    assert split_literal_root("**/*.py", base) == (base, "**/*.py")
    assert split_literal_root("src/lib/*.py", base) == (base / "src/lib", "/*.py")
    assert split_literal_root("/abs/dir/**/x", base) == (Path("/abs/dir"), "**/x")
    assert split_literal_root("*.md", base) == (base, "*.md")
    assert split_literal_root("../x/*.md", base) == (Path("/x"), "/*.md")
