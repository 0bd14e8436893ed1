"""`tether agents create | config | list` through the real CLI against a temporary TETHER_HOME."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.manage_support import tether, tether_json


def test_create_writes_the_record_and_its_memory_blocks(workdir: Path, tether_home: Path) -> None:
    made = tether_json("agents", "create", "--name", "Ada", "--model", "anthropic/claude-test",
                       "--description", "reviews code", "--tags", "team:a,role:review",
                       "--block", "persona=I review code.", cwd=workdir)
    assert made["id"].startswith("agent-local-") and made["name"] == "Ada"
    assert made["tags"] == ["team:a", "role:review"] and made["model"] == "anthropic/claude-test"
    assert made["blocks"] == [{"label": "persona", "value": "I review code.",
                               "description": "the persona block", "read_only": False}]
    records = list((tether_home / "agents").glob("*.json"))
    assert len(records) == 1 and json.loads(records[0].read_text())["description"] == "reviews code"
    persona = tether_home / "agents" / made["id"] / "memory" / "system" / "persona.md"
    assert "I review code." in persona.read_text()


def test_list_filters_by_name_query_and_tags(workdir: Path) -> None:
    a = tether_json("agents", "create", "--name", "Ada", "--tags", "x,y", cwd=workdir)["id"]
    b = tether_json("agents", "create", "--name", "Bob", "--description", "likes zebras",
                    "--tags", "y", cwd=workdir)["id"]
    ids = lambda *args: [r["id"] for r in tether_json("agents", "list", *args, cwd=workdir)]  # noqa: E731
    assert ids() == [a, b]
    assert ids("--name", "ada") == [a]
    assert ids("--query", "ZEBRA") == [b]
    assert ids("--tags", "x,y") == [a, b]
    assert ids("--tags", "x,y", "--match-all-tags") == [a]
    assert ids("--limit", "1") == [b]
    rows = tether_json("agents", "list", "--name", "Ada", "--include-blocks", cwd=workdir)
    assert rows[0]["blocks"] == []


def test_config_updates_fields_and_shows_the_agent(workdir: Path, tether_home: Path) -> None:
    agent = tether_json("agents", "create", "--name", "Ada", "--tags", "x", cwd=workdir)["id"]
    changed = tether_json("agents", "config", agent, "--name", "Ada Two", "--set-model",
                          "openai/gpt-test", "--add-tag", "y", "--remove-tag", "x", cwd=workdir)
    assert changed["name"] == "Ada Two" and changed["model"] == "openai/gpt-test"
    assert changed["tags"] == ["y"] and changed["updated_at"] > changed["created_at"]
    shown = tether_json("agents", "config", agent, cwd=workdir)
    assert shown["name"] == "Ada Two" and "blocks" in shown


def test_bad_input_exits_1_naming_it_and_writes_nothing(workdir: Path, tether_home: Path) -> None:
    bad = tether("agents", "create", "--model", "not-a-handle", cwd=workdir)
    assert bad.code == 1 and "model must be a handle" in bad.stderr and bad.stdout == ""
    assert not (tether_home / "agents").exists()
    bad = tether("agents", "create", "--block", "nolabel", cwd=workdir)
    assert bad.code == 1 and "--block expects LABEL=TEXT" in bad.stderr
    bad = tether("agents", "create", "--block", "../x=y", cwd=workdir)
    assert bad.code == 1 and "block label" in bad.stderr
    assert not (tether_home / "agents").exists()
    missing = tether("agents", "config", "agent-local-nope", "--name", "x", cwd=workdir)
    assert missing.code == 1 and "No agent 'agent-local-nope'" in missing.stderr
    agent = tether_json("agents", "create", cwd=workdir)["id"]
    bad = tether("agents", "config", agent, "--model-settings", "[1]", cwd=workdir)
    assert bad.code == 1 and "model_settings must be an object" in bad.stderr
    both = tether("agents", "list", "--name", "a", "--tags", "b", cwd=workdir)
    assert both.code == 1 and "one of --name, --query, --tags" in both.stderr
