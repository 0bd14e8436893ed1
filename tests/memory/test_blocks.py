from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tether.memory import blocks


def test_parse_frontmatter_and_body() -> None:
    f = blocks.parse("---\ndescription: About the user\nread_only: true\n---\nName: Ada\n")
    assert f.description == "About the user" and f.read_only
    assert f.body == "Name: Ada\n"


def test_text_without_a_fence_is_all_body() -> None:
    f = blocks.parse("just notes\n---\nnot frontmatter\n")
    assert f.body == "just notes\n---\nnot frontmatter\n" and f.description == "" and not f.read_only
    assert blocks.render(f) == "just notes\n---\nnot frontmatter\n"


def test_quoted_values_and_unknown_lines_survive_a_round_trip() -> None:
    text = '---\ndescription: "a: b"\nname: \'it\'\'s\'\n  - odd line\nlimit: 2000\n---\nbody'
    f = blocks.parse(text)
    assert f.description == "a: b" and f.get("name") == "it's" and f.get("limit") == "2000"
    again = blocks.parse(blocks.render(f))
    assert again.meta == f.meta and again.body == "body"
    assert "  - odd line" in blocks.render(f)


def test_read_only_false_and_update_description() -> None:
    f = blocks.parse("---\ndescription: x\nread_only: false\n---\n")
    assert not f.read_only
    g = f.with_meta("description", "new one")
    assert blocks.parse(blocks.render(g)).description == "new one"
    assert blocks.parse(blocks.render(g)).get("read_only") == "false"


def test_new_file_is_one_line_description_and_label() -> None:
    f = blocks.new_file("two\nlines", "b\n", read_only=True)
    assert blocks.render(f) == "---\ndescription: two lines\nread_only: true\n---\nb\n"
    assert blocks.label("system/human.md") == "system/human"


@given(st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1), st.text())
def test_any_description_and_body_round_trip(description: str, body: str) -> None:
    description = blocks.one_line(description)
    f = blocks.new_file(description or "x", body)
    parsed = blocks.parse(blocks.render(f))
    assert parsed.description == (description or "x")
    assert parsed.body == body
