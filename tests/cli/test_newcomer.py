"""What a newcomer meets on the command line, through the real `tether` script: a mistyped
command, words with no terminal, a piped prompt, an MCP server that does not start."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.e2e.support import TETHER, run_tether, tether_env
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"


def test_a_near_miss_of_a_reference_command_is_refused(workdir: Path, tether_home: Path) -> None:
    with FakeProvider([{"text": "never"}]) as fake:
        run = run_tether(["skils", "list", "--model", MODEL], env=tether_env(fake.url, MODEL), cwd=workdir)
        assert fake.requests == []
    assert run.code == 2
    assert "unknown command 'skils'; did you mean 'skills'?" in run.stderr
    assert run.stdout == "" and not tether_home.exists()


def test_words_without_a_terminal_never_reach_the_model(workdir: Path, tether_home: Path) -> None:
    """`tether foo bar </dev/null | cat`: no full-screen app into a pipe, and no turn."""
    with FakeProvider([{"text": "never"}]) as fake:
        proc = subprocess.run([TETHER, "foo", "bar", "--model", MODEL], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, env=tether_env(fake.url, MODEL),
                              cwd=workdir, timeout=60)
        assert fake.requests == []
    assert proc.returncode == 2
    assert "tether: no terminal; use `tether -p 'foo bar'` or pipe a prompt on stdin" in proc.stderr
    assert proc.stdout == "" and not tether_home.exists()


def test_a_terminal_for_keys_but_a_pipe_for_output_is_no_terminal(workdir: Path, tether_home: Path) -> None:
    """`tether | cat` from a shell: stdin is the terminal, stdout is not; nothing is drawn."""
    master, slave = os.openpty()
    try:
        with FakeProvider([{"text": "never"}]) as fake:
            proc = subprocess.run([TETHER, "--model", MODEL], stdin=slave, capture_output=True,
                                  text=True, env=tether_env(fake.url, MODEL), cwd=workdir, timeout=60)
            assert fake.requests == []
    finally:
        os.close(master)
        os.close(slave)
    assert proc.returncode == 2
    assert "tether: no terminal; use `tether -p \"…\"`" in proc.stderr
    assert proc.stdout == ""


def test_a_piped_prompt_is_still_a_headless_prompt(workdir: Path, tether_home: Path) -> None:
    """README: `echo "summarise README.md" | tether`."""
    with FakeProvider([{"text": "a summary"}]) as fake:
        run = run_tether(["--model", MODEL], env=tether_env(fake.url, MODEL), cwd=workdir,
                         stdin="summarise README.md\n")
        sent = json.dumps(fake.requests[0]["body"])
    assert run.code == 0, run.stderr
    assert run.stdout == "a summary\n"
    assert "summarise README.md" in sent


def test_an_empty_stdin_and_no_terminal_says_what_to_do(workdir: Path, tether_home: Path) -> None:
    with FakeProvider([{"text": "never"}]) as fake:
        run = run_tether(["--model", MODEL], env=tether_env(fake.url, MODEL), cwd=workdir, stdin="")
        assert fake.requests == []
    assert run.code == 1
    assert "no terminal" in run.stderr and "tether -p" in run.stderr


BROKEN = {"mcpServers": {"broken": {"command": "/nonexistent/mcp-server-binary", "args": []}}}


def test_an_mcp_server_that_fails_is_reported_on_stderr_in_text_mode(workdir: Path, tether_home: Path) -> None:
    with FakeProvider([{"text": "answered without it"}]) as fake:
        run = run_tether(["-p", "hi", "--model", MODEL, "--mcp-config", json.dumps(BROKEN)],
                         env=tether_env(fake.url, MODEL), cwd=workdir)
    assert run.code == 0, run.stderr
    assert run.stdout == "answered without it\n"
    assert "tether: MCP server 'broken' failed to start:" in run.stderr


def test_stream_json_keeps_the_failed_server_in_its_init_event(workdir: Path, tether_home: Path) -> None:
    with FakeProvider([{"text": "answered without it"}]) as fake:
        run = run_tether(["-p", "hi", "--model", MODEL, "--mcp-config", json.dumps(BROKEN),
                          "--output-format", "stream-json"], env=tether_env(fake.url, MODEL), cwd=workdir)
    assert run.code == 0, run.stderr
    init = run.events[0]
    assert [s["name"] for s in init["mcp_servers"] if s["status"] == "failed"] == ["broken"]
    assert "failed to start" not in run.stderr


def test_continue_picks_up_this_folders_last_conversation(
    workdir: Path, tether_home: Path, tmp_path: Path
) -> None:
    with FakeProvider([{"text": "the first answer"}, {"text": "the second answer"}]) as fake:
        env = tether_env(fake.url, MODEL)
        first = run_tether(["-p", "remember the word pelican", "--model", MODEL,
                            "--output-format", "stream-json"], env=env, cwd=workdir)
        other = tmp_path / "elsewhere"
        other.mkdir()
        elsewhere = run_tether(["-c", "-p", "what word?", "--model", MODEL], env=env, cwd=other)
        second = run_tether(["--continue", "-p", "what word?", "--model", MODEL,
                             "--output-format", "stream-json"], env=env, cwd=workdir)
        resent = json.dumps(fake.requests[1]["body"])
    assert first.code == 0 and second.code == 0, second.stderr
    assert elsewhere.code == 1 and "no conversation to continue in" in elsewhere.stderr
    assert second.events[-1]["conversation_id"] == first.events[-1]["conversation_id"]
    assert "remember the word pelican" in resent and "the first answer" in resent
    assert len(list(tether_home.glob("conversations/*/messages.jsonl"))) == 1


def test_continue_conflicts_with_naming_a_conversation(workdir: Path) -> None:
    run = run_tether(["-c", "--new", "-p", "x"], env=dict(os.environ), cwd=workdir)
    assert run.code == 1 and "-c/--continue cannot be combined" in run.stderr


def test_completion_lists_models_agents_and_conversations(workdir: Path, tether_home: Path) -> None:
    with FakeProvider([{"text": "hi"}]) as fake:
        env = tether_env(fake.url, MODEL)
        first = run_tether(["-p", "hi", "--model", MODEL, "--output-format", "stream-json"], env=env, cwd=workdir)
    assert first.code == 0, first.stderr
    agent, conversation = first.events[-1]["agent_id"], first.events[-1]["conversation_id"]
    env["PATH"] = f"{Path(TETHER).parent}:{env.get('PATH', '')}"
    script = run_tether(["completion", "bash"], env=env, cwd=workdir).stdout

    def complete(*words: str) -> list[str]:
        line = " ".join(f"'{w}'" for w in ("tether", *words))
        shell = (f'{script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words)}; _tether; '
                 'printf "%s\\n" "${COMPREPLY[@]}"')
        out = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, env=env,
                             cwd=workdir, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    assert complete("--agent", "") == [agent]
    assert conversation in complete("--conversation", "local-")
    models = complete("--model", "")
    assert models[0] == MODEL and "openai/" in " ".join(models)
    (workdir / "README.md").write_text("x")
    assert "README.md" not in complete("--model", "")  # no file names for a model
    for shell in ("zsh", "fish"):
        text = run_tether(["completion", shell], env=env, cwd=workdir).stdout
        assert "tether completion --list agents" in text and "tether completion --list models" in text


def test_continue_falls_back_to_the_folders_last_agent(workdir: Path, tether_home: Path) -> None:
    """State written before conversations were remembered per folder: the folder's last agent."""
    with FakeProvider([{"text": "the first answer"}, {"text": "the second answer"}]) as fake:
        env = tether_env(fake.url, MODEL)
        first = run_tether(["-p", "remember pelican", "--model", MODEL, "--output-format", "stream-json"],
                           env=env, cwd=workdir)
        state = tether_home / "state" / "last-agents.json"
        doc = json.loads(state.read_text())
        del doc["recent"]
        state.write_text(json.dumps(doc))
        second = run_tether(["-c", "-p", "what word?", "--model", MODEL, "--output-format", "stream-json"],
                            env=env, cwd=workdir)
    assert second.code == 0, second.stderr
    assert second.events[-1]["conversation_id"] == first.events[-1]["conversation_id"]
