"""The Seatbelt profile text (sandbox-exec cannot run on Linux, so only the rendering is tested)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tether.sandbox import SandboxError, SandboxPolicy
from tether.sandbox.seatbelt import render_seatbelt, render_seatbelt_profile


def _workspace(network: bool = False) -> SandboxPolicy:
    return SandboxPolicy(
        "workspace",
        writable_roots=(Path("/w"), Path("/t")),
        readonly_roots=(Path("/w/.git"), Path("/w/.tether")),
        denied_roots=(Path("/iso"), Path("/h/.ssh")),
        restrict_writes=True,
        network=network,
        pids_limit=None,
        tmp_dir=Path("/t"),
    )


def test_workspace_profile_exact_text() -> None:
    assert render_seatbelt_profile(_workspace()).splitlines() == [
        "(version 1)",
        "(allow default)",
        "(deny file-write*)",
        '(allow file-write* (literal "/dev/null") (literal "/dev/zero") (literal "/dev/tty")'
        ' (literal "/dev/dtracehelper") (regex #"^/dev/fd/") (regex #"^/dev/ttys[0-9]+$"))',
        '(deny file-read* file-write* (subpath "/iso"))',
        '(allow file-read* file-write* (subpath "/w"))',
        '(allow file-read* file-write* (subpath "/t"))',
        '(deny file-read* file-write* (subpath "/h/.ssh"))',
        '(allow file-read* (subpath "/w/.git"))',
        '(deny file-write* (subpath "/w/.git"))',
        '(allow file-read* (subpath "/w/.tether"))',
        '(deny file-write* (subpath "/w/.tether"))',
        "(deny network*)",
    ]


def test_network_allowed_and_unrestricted_writes() -> None:
    text = render_seatbelt_profile(_workspace(network=True))
    assert text.splitlines()[-1] == "(deny network-outbound (remote unix-socket))"  # c6
    assert "network" not in render_seatbelt_profile(replace(_workspace(network=True), unix_sockets=True))
    cross = SandboxPolicy("cross-agent", (Path("/a/me"),), (), (Path("/a"),), False, True, None,
                          unix_sockets=True)
    lines = render_seatbelt_profile(cross).splitlines()
    assert "(deny file-write*)" not in lines
    assert lines[2:] == [
        '(deny file-read* file-write* (subpath "/a"))',
        '(allow file-read* file-write* (subpath "/a/me"))',
    ]


def test_paths_are_escaped_and_control_characters_refused() -> None:
    policy = SandboxPolicy("workspace", (Path('/w/a"b\\c'),), (), (), True, True, None)
    assert '(subpath "/w/a\\"b\\\\c")' in render_seatbelt_profile(policy)
    bad = SandboxPolicy("workspace", (Path("/w/a\nb"),), (), (), True, True, None)
    with pytest.raises(SandboxError, match="control"):
        render_seatbelt_profile(bad)


def test_render_seatbelt_argv() -> None:
    policy = _workspace()
    argv = render_seatbelt(policy, ["bash", "-c", "ls"])
    assert argv == [
        "/usr/bin/sandbox-exec",
        "-p",
        render_seatbelt_profile(policy),
        "--",
        "bash",
        "-c",
        "ls",
    ]
    with pytest.raises(SandboxError):
        render_seatbelt(policy, [])
