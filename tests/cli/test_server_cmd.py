"""`tether server`'s command line (cli/server_cmd.py): every flag parsed and checked before
anything binds; the real console script prints its help and names a bad flag."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tether.cli.server_cmd import options_from_argv, run_server_command
from tether.errors import UsageError
from tether.server import auth
from tether.server.app_server import DEFAULT_LISTEN, DEFAULT_MAX_FRAME, ServerOptions

TETHER = str(Path(sys.executable).with_name("tether"))
FLAGS = ("--listen", "--ws-auth", "--ws-token-file", "--ws-token-sha256", "--ws-shared-secret-file",
         "--ws-issuer", "--ws-audience", "--ws-max-clock-skew-seconds", "--max-frame-bytes",
         "--ping-interval", "--ping-timeout", "--max-queue", "--max-connections-per-ip", "--cwd",
         "--idle-release-after", "--store", "--lease-ttl", "--log-format", "--openai-api")


def tether(args: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TETHER_HOME": str(home), "TETHER_CRON": "0"}
    return subprocess.run([TETHER, "server", *args], env=env, capture_output=True, text=True,
                          timeout=60)


def test_help_lists_every_flag(tmp_path: Path) -> None:
    shown = tether(["--help"], tmp_path / "home")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("usage: tether server ")
    assert "Serve agents to protocol v2 clients over a websocket." in shown.stdout
    for flag in FLAGS:
        assert flag in shown.stdout, flag


def test_an_unknown_flag_is_named_by_the_real_command(tmp_path: Path) -> None:
    refused = tether(["--bogus"], tmp_path / "home")
    assert refused.returncode == 1
    assert refused.stderr == "Error: unrecognized arguments: --bogus (see `tether server --help`)\n"
    assert refused.stdout == ""


def test_defaults_are_the_server_options_defaults() -> None:
    options = options_from_argv([])
    assert options == ServerOptions(policy=options.policy)
    assert (options.listen, options.max_frame_bytes) == (DEFAULT_LISTEN, DEFAULT_MAX_FRAME)


def test_every_value_reaches_the_options(tmp_path: Path) -> None:
    options = options_from_argv([
        "--listen", "ws://127.0.0.1:4545/app", "--max-frame-bytes", "1000", "--ping-interval", "5",
        "--ping-timeout", "7", "--max-queue", "3", "--max-connections-per-ip", "9",
        "--cwd", str(tmp_path), "--idle-release-after", "0", "--lease-ttl", "2.5",
        "--log-format", "json", "--openai-api",
    ])
    assert options.listen == "ws://127.0.0.1:4545/app"
    assert (options.max_frame_bytes, options.ping_interval, options.ping_timeout) == (1000, 5.0, 7.0)
    assert (options.max_queue, options.max_connections_per_ip) == (3, 9)
    assert options.cwd == tmp_path.resolve()
    assert (options.idle_release_after, options.lease_ttl) == (0.0, 2.5)
    assert (options.log_format, options.openai_api, options.store) == ("json", True, None)
    assert isinstance(options.policy, auth.AuthPolicy)


@pytest.mark.parametrize(("argv", "named"), [
    (["--max-queue", "0"], "--max-queue"),
    (["--max-frame-bytes", "-1"], "--max-frame-bytes"),
    (["--max-connections-per-ip", "0"], "--max-connections-per-ip"),
    (["--lease-ttl", "0"], "--lease-ttl"),
    (["--idle-release-after", "-1"], "--idle-release-after"),
    (["--idle-release-after", "nan"], "--idle-release-after"),
    (["--log-format", "xml"], "--log-format"),
    (["--listen", "http://127.0.0.1:0"], "--listen"),
    (["--listen", "ws://127.0.0.1:0/ws?x=1"], "--listen"),
])
def test_a_bad_value_is_a_usage_error_naming_its_flag(argv: list[str], named: str) -> None:
    with pytest.raises(UsageError, match=named):
        options_from_argv(argv)


def test_the_grace_period_defaults_to_a_minute() -> None:
    assert options_from_argv([]).idle_release_after == 60.0
    assert options_from_argv(["--idle-release-after", "0"]).idle_release_after == 0.0


def test_non_loopback_without_auth_refuses_before_binding(capsys: pytest.CaptureFixture[str]) -> None:
    for listen in ("ws://0.0.0.0:0", "ws://[::]:0", "ws://192.168.77.1:0"):
        assert run_server_command(["--listen", listen]) == 1
        assert "refusing to listen on non-loopback" in capsys.readouterr().err
    assert run_server_command(["--listen", "http://127.0.0.1:0"]) == 1
    assert run_server_command(["--listen", "ws://127.0.0.1:0/ws?x=1"]) == 1
    assert run_server_command(["--ws-token-sha256", "a" * 64]) == 1
    assert "requires `--ws-auth" in capsys.readouterr().err
