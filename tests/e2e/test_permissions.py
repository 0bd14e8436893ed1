"""End to end: settings files, rules, trust and the headless approval path through real `tether`."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.support import run_tether, tether_env
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"




def bash_call(command: str) -> dict:
    return {"name": "Bash", "arguments": {"command": command, "description": "test"}}


def run_one_call(workdir: Path, call: dict, *flags: str, extra_env: dict | None = None):
    script = [{"tool_calls": [call]}, {"text": "done"}]
    with FakeProvider(script) as fake:
        run = run_tether(
            ["-p", "go", "--model", MODEL, "--output-format", "stream-json", *flags],
            env=tether_env(fake.url, MODEL, extra_env), cwd=workdir,
        )
        assert fake.violations == []
    returns = run.of_type("message", "tool_return_message")
    return run, (returns[0] if returns else None)


def write_settings(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_allowed_rule_admits_the_command_but_not_a_chained_one(workdir: Path) -> None:
    rule = "Bash(touch made:*)"
    run, ret = run_one_call(workdir, bash_call("touch made"), "--allowedTools", rule)
    assert run.code == 0, run.stderr
    assert ret["status"] == "success" and (workdir / "made").exists()
    run, ret = run_one_call(workdir, bash_call("touch made && touch evil"), "--allowedTools", rule)
    assert ret["status"] == "error" and not (workdir / "evil").exists()
    assert "Tool requires approval (headless mode)" in ret["tool_return"]
    assert "touch evil" in ret["tool_return"]  # the reason names the segment that needs approval


def test_user_settings_deny_reaches_the_model_as_a_rule_denial(workdir: Path, tether_home: Path) -> None:
    write_settings(tether_home / "settings.json", {"permissions": {"deny": ["Bash(rm:*)"]}})
    (workdir / "keep").write_text("x")
    run, ret = run_one_call(workdir, bash_call("ls && timeout 5 rm keep"), "--yolo")
    assert run.code == 0, run.stderr
    assert (workdir / "keep").exists()
    assert ret["status"] == "error"
    assert "Permission denied by rule: Bash(rm:*)" in ret["tool_return"]


def test_malformed_rule_is_reported_with_file_and_rule(workdir: Path) -> None:
    settings = workdir / ".tether" / "settings.json"
    write_settings(settings, {"permissions": {"deny": ["Bash(rm:*)", "Bash(rm -rf"]}})
    run = run_tether(["-p", "hi", "--model", MODEL], env=tether_env("http://127.0.0.1:9", MODEL), cwd=workdir)
    assert run.code == 1
    assert str(settings) in run.stderr and "permissions.deny[1]" in run.stderr
    assert "Bash(rm -rf" in run.stderr


def test_settings_that_are_not_json_are_an_error(workdir: Path, tether_home: Path) -> None:
    tether_home.mkdir(parents=True, exist_ok=True)
    (tether_home / "settings.json").write_text("{permissions: nope")
    run = run_tether(["-p", "hi", "--model", MODEL], env=tether_env("http://127.0.0.1:9", MODEL), cwd=workdir)
    assert run.code == 1 and "settings.json: not valid JSON" in run.stderr


def test_malformed_cli_rule_names_the_flag(workdir: Path) -> None:
    run = run_tether(["-p", "hi", "--model", MODEL, "--allowedTools", "Bash(ls"],
                     env=tether_env("http://127.0.0.1:9", MODEL), cwd=workdir)
    assert run.code == 1 and "--allowedTools" in run.stderr and "Bash(ls" in run.stderr


def test_untrusted_project_allow_is_ignored_until_trusted(workdir: Path, tether_home: Path) -> None:
    write_settings(workdir / ".tether" / "settings.json",
                   {"permissions": {"allow": ["Bash(touch made)"], "mode": "unrestricted"}})
    run, ret = run_one_call(workdir, bash_call("touch made"))
    assert ret["status"] == "error" and not (workdir / "made").exists()
    assert "ignoring permissions.allow, permissions.mode unrestricted from" in run.stderr
    assert "not trusted" in run.stderr and "tether trust" in run.stderr

    run, ret = run_one_call(workdir, bash_call("touch made"), "--trust")
    assert ret["status"] == "success" and (workdir / "made").exists()
    (workdir / "made").unlink()

    trusted = run_tether(["trust"], env=tether_env("http://127.0.0.1:9", MODEL), cwd=workdir)
    assert trusted.code == 0 and "trusted:" in trusted.stdout
    assert json.loads((tether_home / "trusted-folders.json").read_text())["folders"]
    run, ret = run_one_call(workdir, bash_call("touch made"))
    assert ret["status"] == "success" and "ignoring" not in run.stderr

    # Trust is bound to the content: an edit after trusting re-locks the folder.
    write_settings(workdir / ".tether" / "settings.local.json", {"permissions": {"allow": ["Bash"]}})
    (workdir / "made").unlink()
    run, ret = run_one_call(workdir, bash_call("touch made"))
    assert ret["status"] == "error" and "changed since the folder was trusted" in run.stderr


def test_untrusted_project_deny_still_applies(workdir: Path) -> None:
    write_settings(workdir / ".tether" / "settings.json", {"permissions": {"deny": ["Read(secret.txt)"]}})
    (workdir / "secret.txt").write_text("CANARY")
    call = {"name": "Read", "arguments": {"file_path": "secret.txt"}}
    run, ret = run_one_call(workdir, call)
    assert ret["status"] == "error" and "Permission denied by rule: Read(secret.txt)" in ret["tool_return"]
    assert "CANARY" not in run.stdout


def test_project_hooks_wait_for_trust(workdir: Path) -> None:
    marker = workdir / "hook-ran"
    write_settings(workdir / ".tether" / "settings.json", {"hooks": {"PreToolUse": [
        {"matcher": "Bash", "hooks": [{"type": "command", "command": f"touch {marker}"}]}]}})
    run, _ = run_one_call(workdir, bash_call("true"), "--yolo")
    assert run.code == 0 and not marker.exists()
    assert "ignoring hooks from" in run.stderr
    run, _ = run_one_call(workdir, bash_call("true"), "--yolo", "--trust")
    assert run.code == 0 and marker.exists()


def test_settings_mode_applies_without_a_flag(workdir: Path, tether_home: Path) -> None:
    write_settings(tether_home / "settings.json", {"permissions": {"mode": "acceptEdits"}})
    call = {"name": "Write", "arguments": {"file_path": "new.txt", "content": "hi\n"}}
    run, ret = run_one_call(workdir, call)
    assert ret["status"] == "success" and (workdir / "new.txt").read_text() == "hi\n"
    (workdir / "new.txt").unlink()
    run, ret = run_one_call(workdir, call, "--permission-mode", "standard")
    assert ret["status"] == "error" and not (workdir / "new.txt").exists()


def test_read_only_shell_runs_without_rules_but_writes_do_not(workdir: Path) -> None:
    (workdir / "a.txt").write_text("hello\n")
    run, ret = run_one_call(workdir, bash_call("cat a.txt | wc -l"))
    assert ret["status"] == "success", ret
    run, ret = run_one_call(workdir, bash_call("cat a.txt > b.txt"))
    assert ret["status"] == "error" and not (workdir / "b.txt").exists()


def test_file_tools_keep_to_the_sandbox_roots(workdir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    call = {"name": "Write", "arguments": {"file_path": str(outside), "content": "x"}}
    run, ret = run_one_call(workdir, call, "--yolo", extra_env={"TETHER_FS_SANDBOX": "1"})
    assert run.code == 0, run.stderr
    assert ret["status"] == "error" and "Permission denied by workspace sandbox" in ret["tool_return"]
    assert not outside.exists()
    call = {"name": "Write", "arguments": {"file_path": ".git/hooks/pre-commit", "content": "x"}}
    run, ret = run_one_call(workdir, call, "--yolo", extra_env={"TETHER_FS_SANDBOX": "1"})
    assert ret["status"] == "error" and not (workdir / ".git" / "hooks").exists()
    run, ret = run_one_call(workdir, {"name": "Write", "arguments": {"file_path": "in.txt", "content": "x"}},
                            "--yolo", extra_env={"TETHER_FS_SANDBOX": "1"})
    assert ret["status"] == "success" and (workdir / "in.txt").exists()


def test_grep_never_reads_a_file_a_deny_rule_protects(workdir: Path, tether_home: Path) -> None:
    write_settings(tether_home / "settings.json", {"permissions": {"deny": ["Read(.env)"]}})
    (workdir / ".env").write_text("API_KEY=CANARY-42\n")
    (workdir / "app.py").write_text("API_KEY = load()\n")
    call = {"name": "Grep", "arguments": {"pattern": "API_KEY", "output_mode": "content"}}
    run, ret = run_one_call(workdir, call)
    assert ret["status"] == "success" and "app.py" in ret["tool_return"]
    assert "CANARY-42" not in run.stdout and ".env" not in ret["tool_return"]


def test_trust_is_bound_to_project_mods_and_skills_too(workdir: Path) -> None:
    env = tether_env("http://127.0.0.1:9", MODEL)
    (workdir / ".tether" / "mods").mkdir(parents=True)
    (workdir / ".tether" / "mods" / "helper.py").write_text("def activate(api):\n    pass\n")
    assert run_tether(["trust"], env=env, cwd=workdir).code == 0
    status = run_tether(["trust", "--status"], env=env, cwd=workdir)
    assert status.stdout.startswith("trusted:")
    (workdir / ".tether" / "mods" / "helper.py").write_text("import os\ndef activate(api):\n    os.system('id')\n")
    status = run_tether(["trust", "--status"], env=env, cwd=workdir)
    assert status.stdout.startswith("changed:"), status.stdout
