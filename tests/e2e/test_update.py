"""`tether update` end to end: wheels of this project at two versions on a package index served
on 127.0.0.1, a real venv (and a real pipx install) updated by the real command; a broken index
leaves the old version working; the start-up check never waits and respects its switches."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import shutil
import subprocess
import sys
import threading
import time
import tomllib
import zipfile
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import tether
from tests.e2e.support import TETHER

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(next(p for p in sys.path if p.endswith("site-packages")))
OLD, NEW, BROKEN = "5.0.0", "5.1.0", "5.2.0"


# --- wheels and an index ------------------------------------------------------------------------


def build_wheel(version: str, out: Path) -> Path:
    """A py3-none-any wheel of src/tether at `version` (metadata from pyproject.toml)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    src = Path(tether.__file__).parent
    dist = f"tether-{version}.dist-info"
    files: dict[str, bytes] = {}
    for path in sorted(src.rglob("*")):
        if (
            path.is_file()
            and "__pycache__" not in path.parts
            and path.suffix not in (".pyc", ".so")
        ):
            rel = "tether/" + path.relative_to(src).as_posix()
            data = path.read_bytes()
            if rel == "tether/__init__.py":
                data = data.replace(
                    f'__version__ = "{tether.__version__}"'.encode(),
                    f'__version__ = "{version}"'.encode(),
                )
            files[rel] = data
    meta = [
        "Metadata-Version: 2.1",
        "Name: tether",
        f"Version: {version}",
        *(f"Requires-Dist: {d}" for d in project["dependencies"]),
    ]
    files[f"{dist}/METADATA"] = ("\n".join(meta) + "\n").encode()
    files[f"{dist}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: tether-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    files[f"{dist}/entry_points.txt"] = b"[console_scripts]\ntether = tether.cli.main:entry\n"
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        writer.writerow([name, f"sha256={digest}", len(data)])
    writer.writerow([f"{dist}/RECORD", "", ""])
    files[f"{dist}/RECORD"] = record.getvalue().encode()
    wheel = out / f"tether-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return wheel


def write_index(root: Path, wheels: list[Path]) -> None:
    (root / "simple" / "tether").mkdir(parents=True)
    (root / "files").mkdir()
    links = []
    for wheel in wheels:
        shutil.copy(wheel, root / "files" / wheel.name)
        links.append(f'<a href="../../files/{wheel.name}">{wheel.name}</a><br>')
    page = "<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n"
    (root / "simple" / "tether" / "index.html").write_text(page)
    (root / "simple" / "index.html").write_text('<a href="tether/">tether</a>\n')


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Two indexes on 127.0.0.1: `good` has OLD and NEW; `broken` adds BROKEN whose wheel is
    not a zip (the install fails after the resolver picked it)."""
    base = tmp_path_factory.mktemp("index")
    built = base / "built"
    built.mkdir()
    old, new = build_wheel(OLD, built), build_wheel(NEW, built)
    bad = built / f"tether-{BROKEN}-py3-none-any.whl"
    bad.write_bytes(b"this is not a wheel\n" * 100)
    write_index(base / "good", [old, new])
    write_index(base / "broken", [old, new, bad])
    servers = {}
    urls = {}
    for name in ("good", "broken"):
        server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(base / name)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers[name] = server
        urls[name] = f"http://127.0.0.1:{server.server_address[1]}/simple"
    urls["old_wheel"] = str(old)
    yield urls
    for server in servers.values():
        server.shutdown()
        server.server_close()


# --- installs ----------------------------------------------------------------------------------


def shared_deps(tmp: Path) -> Path:
    """The test environment's dependencies (never tether itself) as a folder of links, so a new
    environment can import them without a network."""
    deps = tmp / "shared-deps"
    if not deps.exists():
        deps.mkdir()
        skip = (
            "tether",
            "__editable__",
            "pip",
            "setuptools",
            "_distutils_hack",
            "distutils-precedence",
            "pkg_resources",
            "__pycache__",
        )
        for entry in SITE.iterdir():
            if entry.name.startswith(skip) or entry.suffix == ".pth":
                continue
            (deps / entry.name).symlink_to(entry)
    return deps


def share_dependencies(site: Path, tmp: Path) -> None:
    (site / "zz-shared-deps.pth").write_text(str(shared_deps(tmp)) + "\n")


def clean_env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TETHER_", "PIP_", "PIPX_", "VIRTUAL_ENV"))
    }
    env.update(
        TETHER_HOME=str(tmp / "home"),
        HOME=str(tmp / "userhome"),
        PIP_NO_CACHE_DIR="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        **extra,
    )
    return env


def run(
    argv: list[str], env: dict[str, str], timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)


def version_of(python: Path, env: dict[str, str]) -> str:
    proc = run([str(python), "-m", "tether", "--version"], env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()[0]


@pytest.fixture
def venv(tmp_path: Path, index: dict[str, str]) -> tuple[Path, dict[str, str]]:
    env = clean_env(tmp_path)
    target = tmp_path / "venv"
    proc = run([sys.executable, "-m", "venv", str(target)], env)
    assert proc.returncode == 0, proc.stderr
    site = next((target / "lib").glob("python3*/site-packages"))
    share_dependencies(site, tmp_path)
    python = target / "bin" / "python"
    proc = run(
        [str(python), "-m", "pip", "install", "--index-url", index["good"], f"tether=={OLD}"], env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return python, env


def update(python: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run([str(python.parent / "tether"), "update", *args], env)


def test_venv_install_updates_from_the_index(
    venv: tuple[Path, dict[str, str]], index: dict[str, str]
) -> None:
    python, env = venv
    assert version_of(python, env) == OLD
    env = {**env, "TETHER_UPDATE_INDEX_URL": index["good"]}
    check = update(python, env, "--check")
    assert check.returncode == 0, check.stderr
    assert f"tether {NEW} is available (you have {OLD})" in check.stdout
    assert version_of(python, env) == OLD
    done = update(python, env)
    assert done.returncode == 0, done.stderr
    assert f"tether updated from {OLD} to {NEW} (with venv); restart" in done.stdout
    assert version_of(python, env) == NEW
    again = update(python, env)
    assert again.returncode == 0 and f"tether {NEW} is up to date" in again.stdout


def test_broken_index_leaves_the_old_version_working(
    venv: tuple[Path, dict[str, str]], index: dict[str, str], tmp_path: Path
) -> None:
    python, env = venv
    failed = update(python, {**env, "TETHER_UPDATE_INDEX_URL": index["broken"]})
    assert failed.returncode == 1
    assert f"installing tether {BROKEN} with venv failed" in failed.stderr
    assert f"tether {OLD} is still installed and working. To retry by hand:" in failed.stderr
    assert version_of(python, env) == OLD
    unreachable = update(python, {**env, "TETHER_UPDATE_INDEX_URL": "http://127.0.0.1:9/simple"})
    assert unreachable.returncode == 1 and "cannot reach the package index" in unreachable.stderr
    assert version_of(python, env) == OLD
    # the old version still runs a real turn
    from tether.testing.fake_provider import FakeProvider

    with FakeProvider([{"text": "still working"}]) as fake:
        turn = run(
            [str(python.parent / "tether"), "-p", "hi", "--model", "anthropic/claude-test"],
            {**env, "ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": "sk-test"},
            timeout=60,
        )
    assert turn.returncode == 0 and turn.stdout.strip() == "still working", turn.stderr


def test_source_tree_never_updates_itself(tmp_path: Path) -> None:
    for word in ("update", "upgrade"):
        proc = run([TETHER, word], clean_env(tmp_path))
        assert proc.returncode == 1 and "update it with git" in proc.stderr


def test_pipx_install_updates_with_pipx(tmp_path: Path, index: dict[str, str]) -> None:
    pipx = shutil.which("pipx") or str(Path(sys.executable).parent / "pipx")
    assert Path(pipx).exists(), "pipx is a dev dependency: pip install -e '.[dev]'"
    # pipx's shared libraries (pip) as a venv made here, offline, that also shows the test
    # environment's dependencies to every pipx venv
    shared = tmp_path / "pipx-shared"
    made = run([sys.executable, "-m", "venv", str(shared)], clean_env(tmp_path))
    assert made.returncode == 0, made.stderr
    shared_site = next((shared / "lib").glob("python3*/site-packages"))
    for entry in shared_deps(tmp_path).iterdir():  # in the folder itself: a .pth there is not read
        (shared_site / entry.name).symlink_to(entry.resolve())
    env = clean_env(
        tmp_path,
        PIPX_HOME=str(tmp_path / "pipx"),
        PIPX_BIN_DIR=str(tmp_path / "bin"),
        PIPX_MAN_DIR=str(tmp_path / "man"),
        PIPX_SHARED_LIBS=str(shared),
        PIPX_DISABLE_SHARED_LIBS_AUTO_UPGRADE="1",
    )
    env["PATH"] = f"{Path(pipx).parent}:{env['PATH']}"
    proc = run([pipx, "install", "--index-url", index["good"], f"tether=={OLD}"], env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    venv = tmp_path / "pipx" / "venvs" / "tether"
    python = venv / "bin" / "python"
    assert version_of(python, env) == OLD
    done = run(
        [str(tmp_path / "bin" / "tether"), "upgrade"],  # the app pipx put on PATH
        {**env, "TETHER_UPDATE_INDEX_URL": index["good"]},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(with pipx)" in done.stdout
    assert version_of(python, env) == NEW


# --- the start-up check ---------------------------------------------------------------------------


def test_startup_check_is_skipped_for_source_trees_and_when_disabled(tmp_path: Path) -> None:
    from tether.runtime.updater import STAMP, startup_check

    home = tmp_path / "h"
    err = io.StringIO()
    startup_check({}, home, err)  # this checkout: a source tree
    assert not (home / STAMP).exists() and err.getvalue() == ""


def test_startup_check_in_an_install_spawns_one_background_check_and_reports_next_start(
    venv: tuple[Path, dict[str, str]], index: dict[str, str], tmp_path: Path
) -> None:
    python, env = venv
    env = {**env, "TETHER_UPDATE_INDEX_URL": index["good"]}
    code = (
        "import os, sys, time, pathlib\n"
        "from tether.runtime.updater import startup_check\n"
        "t = time.perf_counter()\n"
        "startup_check(os.environ, pathlib.Path(os.environ['TETHER_HOME']))\n"
        "print(round((time.perf_counter() - t) * 1000, 1))\n"
    )
    disabled = run([str(python), "-c", code], {**env, "DISABLE_AUTOUPDATER": "1"})
    assert disabled.returncode == 0 and not (tmp_path / "home" / "update-check.json").exists()
    first = run([str(python), "-c", code], env)
    assert first.returncode == 0, first.stderr
    assert float(first.stdout) >= 0  # its cost (never waiting for the index): bench/update_check.py
    log = tmp_path / "home" / "update.log"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and "tether updated from" not in log.read_text():
        time.sleep(0.2)
    assert version_of(python, env) == NEW, log.read_text()
    second = run([str(python), "-c", code], env)
    assert f"tether: tether updated from {OLD} to {NEW}" in second.stderr
    third = run([str(python), "-c", code], env)
    assert third.stderr == ""  # the notice once, and no second check within a day
    log = (tmp_path / "home" / "update.log").read_text()
    assert log.count("tether updated from") == 1


# --- versions and index pages ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "is_newer", "notable"),
    [
        ("0.2.0", "0.1.0", True, True),
        ("1.0", "0.9.9", True, True),
        ("0.1.1", "0.1.0", True, False),
        ("0.1.0", "0.1.0", False, False),
        ("0.1.10", "0.1.9", True, False),
        ("0.1.0", "0.2.0", False, False),
    ],
)
def test_version_order_and_notable_bumps(a: str, b: str, is_newer: bool, notable: bool) -> None:
    from tether.runtime.updater import newer, notable_bump

    assert newer(a, b) is is_newer
    assert notable_bump(b, a) is notable


@pytest.mark.parametrize("version", ["1.0.0rc1", "2.0.0a3", "1.2.0b1", "1.2.0.dev4", "nonsense"])
def test_prereleases_are_never_picked(version: str) -> None:
    from tether.runtime.updater import is_prerelease, latest_stable

    assert is_prerelease(version)
    assert latest_stable(["0.9.0", version]) == "0.9.0"


def test_index_pages_html_and_json_with_yanked_files(tmp_path: Path) -> None:
    from tether.runtime.updater import versions_in_index

    root = tmp_path / "idx"
    (root / "simple" / "tether").mkdir(parents=True)
    (root / "simple" / "tether" / "index.html").write_text(
        '<a href="x">tether-0.3.0-py3-none-any.whl</a>\n'
        '<a href="y" data-yanked="">tether-0.4.0-py3-none-any.whl</a>\n'
        '<a href="z">tether-0.3.5.tar.gz</a>\n<a href="w">tethered-9.0.0-py3-none-any.whl</a>\n'
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/simple"
        assert versions_in_index(url, "tether") == ["0.3.0", "0.3.5"]
    finally:
        server.shutdown()
        server.server_close()


def test_headless_runs_of_an_install_update_it_in_the_background(
    venv: tuple[Path, dict[str, str]], index: dict[str, str], tmp_path: Path
) -> None:
    from tether.testing.fake_provider import FakeProvider

    python, env = venv
    tether_bin = str(python.parent / "tether")
    stamp, log = tmp_path / "home" / "update-check.json", tmp_path / "home" / "update.log"
    with FakeProvider([{"text": t} for t in ("one", "two", "three", "four")]) as fake:
        env = {
            **env,
            "TETHER_UPDATE_INDEX_URL": index["good"],
            "ANTHROPIC_BASE_URL": fake.url,
            "ANTHROPIC_API_KEY": "sk-test",
        }
        argv = [tether_bin, "-p", "hi", "--model", "anthropic/claude-test"]
        off = run(argv, {**env, "DISABLE_AUTOUPDATER": "1"}, timeout=60)
        assert (off.returncode, off.stdout.strip()) == (0, "one") and not stamp.exists()
        first = run(argv, env, timeout=60)
        assert (first.returncode, first.stdout.strip()) == (0, "two"), first.stderr
        assert stamp.exists()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and "tether updated from" not in log.read_text():
            time.sleep(0.2)
        assert version_of(python, env) == NEW, log.read_text()
        second = run(argv, env, timeout=60)
        assert second.stdout.strip() == "three"
        assert f"tether: tether updated from {OLD} to {NEW} (with venv); restart" in second.stderr
        third = run(argv, env, timeout=60)
        assert third.stdout.strip() == "four" and "updated" not in third.stderr


def test_each_installer_gets_its_own_command(tmp_path: Path) -> None:
    from tether.runtime.updater import Install

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("uv", "pipx"):
        (bin_dir / tool).write_text("#!/bin/sh\n")
        (bin_dir / tool).chmod(0o755)
    on_path = {"PATH": str(bin_dir)}
    site = tmp_path / "venvs" / "tether" / "lib" / "site-packages" / "tether"
    python = str(tmp_path / "venvs" / "tether" / "bin" / "python")
    idx = "http://127.0.0.1:1/simple"
    assert Install("uv", python, site).command("tether", "1.2.0", idx, on_path) == [
        str(bin_dir / "uv"),
        "tool",
        "install",
        "--force",
        "--index-url",
        idx,
        "tether==1.2.0",
    ]
    assert Install("pipx", python, site).command("tether", "1.2.0", None, on_path) == [
        str(bin_dir / "pipx"),
        "runpip",
        "tether",
        "install",
        "--upgrade",
        "tether==1.2.0",
    ]
    # without the tool on PATH, the install's own pip does the same job
    for kind in ("uv", "pipx", "venv"):
        assert Install(kind, python, site).command("tether", "1.2.0", idx, {"PATH": ""})[:4] == [
            python,
            "-m",
            "pip",
            "install",
        ]


def test_forced_package_manager_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from tether.runtime import updater

    monkeypatch.setattr(updater, "_editable", lambda location: False)
    monkeypatch.setattr(
        tether, "__file__", "/opt/v/lib/python3.11/site-packages/tether/__init__.py"
    )
    assert updater.detect_install({"TETHER_PACKAGE_MANAGER": "uv"}).kind == "uv"
    with pytest.raises(updater.UpdateError, match="use pipx, uv or pip"):
        updater.detect_install({"TETHER_PACKAGE_MANAGER": "npm"})
