"""Self-update for Python installs (reference §17.2): how tether was installed (pipx, uv tool,
pip in a venv, or an editable/source tree that is never touched), the newest stable version on
the package index, installing it with the same tool, and the start-up check.

The start-up check costs a stat and a small read on a plain run: at most once a day it starts
a detached child (`python -m tether.runtime.updater --auto`) that does the network and the
install, and the next start prints what happened. Nothing heavy is imported at module level.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    import ssl

DEFAULT_INDEX = "https://pypi.org/simple"
STAMP = "update-check.json"
CHECK_EVERY_MS = 24 * 3_600_000
INSTALL_TIMEOUT_S = 300
_VERSION = re.compile(r"^(\d+(?:\.\d+)*)((?:a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$")


class UpdateError(Exception):
    """The update could not be done; the message says why and what to do."""


# --- versions ------------------------------------------------------------------------------------


def parse_version(text: str) -> tuple[tuple[int, ...], bool] | None:
    """(release numbers, is a pre-release) for a plain PEP 440 version, else None."""
    m = _VERSION.match(text.strip().lstrip("v"))
    if not m:
        return None
    release = tuple(int(p) for p in m.group(1).split("."))
    release = release + (0,) * (3 - len(release)) if len(release) < 3 else release
    return release, bool(m.group(2) or m.group(4))


def is_prerelease(version: str) -> bool:
    parsed = parse_version(version)
    return parsed is None or parsed[1]


def newer(candidate: str, current: str) -> bool:
    a, b = parse_version(candidate), parse_version(current)
    return a is not None and b is not None and a[0] > b[0]


def notable_bump(old: str, new: str) -> bool:
    """A minor or major bump (a patch release updates silently)."""
    a, b = parse_version(old), parse_version(new)
    return a is not None and b is not None and b[0][:2] > a[0][:2]


# --- the index -------------------------------------------------------------------------------------


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def versions_in_index(index_url: str, package: str, timeout: float = 5.0) -> list[str]:
    """Every non-yanked version with a file in the simple index's page for `package`."""
    import urllib.error
    import urllib.request

    url = f"{index_url.rstrip('/')}/{normalize(package)}/"
    request = urllib.request.Request(
        url,
        headers={
            "Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1",
            "User-Agent": "tether-updater",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=_tls()) as resp:
            kind = resp.headers.get("Content-Type", "")
            body = resp.read(20_000_000).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        raise UpdateError(f"the package index answered HTTP {exc.code} for {url}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise UpdateError(f"cannot reach the package index at {url}: {reason}") from None
    if "json" in kind:
        import json

        try:
            files = [
                f["filename"] for f in json.loads(body).get("files", []) if not f.get("yanked")
            ]
        except (ValueError, AttributeError, KeyError, TypeError):
            raise UpdateError(
                f"the package index page {url} is not a simple-API JSON page"
            ) from None
    else:
        files = [
            name
            for attrs, name in re.findall(r"<a\b([^>]*)>([^<]+)</a>", body, re.I)
            if "data-yanked" not in attrs
        ]
    prefix = normalize(package).replace("-", "_")
    found: set[str] = set()
    for filename in files:
        stem = filename.strip()
        for ext in (".whl", ".tar.gz", ".zip"):
            if stem.endswith(ext):
                stem = stem[: -len(ext)]
                break
        else:
            continue
        parts = stem.split("-")
        if len(parts) >= 2 and normalize(parts[0]).replace("-", "_") == prefix:
            found.add(parts[1])
        elif normalize(stem).startswith(normalize(package) + "-"):  # an sdist named with dashes
            found.add(stem[len(package) + 1 :])
    return sorted(v for v in found if parse_version(v) is not None)


def latest_stable(versions: list[str]) -> str | None:
    stable = [v for v in versions if not is_prerelease(v)]
    return max(stable, key=lambda v: parse_version(v)[0], default=None)  # type: ignore[index]


def _tls() -> ssl.SSLContext | None:
    try:
        import ssl

        import certifi

        return ssl.create_default_context(cafile=certifi.where())
    except ImportError:
        return None


# --- how tether was installed ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Install:
    kind: str  # pipx | uv | venv | editable | system
    python: str
    location: Path  # where the tether package sits
    why: str = ""  # for editable/system: why tether will not update itself

    @property
    def updatable(self) -> bool:
        return self.kind in ("pipx", "uv", "venv")

    def command(
        self, package: str, version: str, index_url: str | None, env: Mapping[str, str]
    ) -> list[str]:
        spec = f"{package}=={version}"
        index = ["--index-url", index_url] if index_url else []
        if self.kind == "pipx":
            import shutil

            pipx = shutil.which("pipx", path=env.get("PATH"))
            if pipx:
                venv = Path(self.python).parent.parent.name
                return [pipx, "runpip", venv, "install", "--upgrade", *index, spec]
        if self.kind == "uv":
            import shutil

            uv = shutil.which("uv", path=env.get("PATH"))
            if uv:
                return [
                    uv,
                    "tool",
                    "install",
                    "--force",
                    *(["--index-url", index_url] if index_url else []),
                    spec,
                ]
        return [
            self.python,
            "-m",
            "pip",
            "install",
            "--upgrade",
            "--disable-pip-version-check",
            *index,
            spec,
        ]


def detect_install(env: Mapping[str, str] | None = None) -> Install:
    """How the running tether was installed; `TETHER_PACKAGE_MANAGER` (pipx|uv|pip) overrides."""
    env = os.environ if env is None else env
    import tether

    location = Path(tether.__file__).resolve().parent
    python = sys.executable
    if not any(p in ("site-packages", "dist-packages") for p in location.parts):
        return Install(
            "editable",
            python,
            location,
            f"tether runs from a source tree ({location.parent}); update it with git",
        )
    if _editable(location):
        return Install(
            "editable", python, location, "tether is an editable install; update its source"
        )
    forced = env.get("TETHER_PACKAGE_MANAGER", "").strip().lower()
    prefix = Path(sys.prefix).resolve()
    if forced in ("pipx", "uv"):
        return Install(forced, python, location)
    if forced == "pip" or forced == "":
        text = str(prefix)
        if not forced and ("/pipx/venvs/" in text or _under(prefix, env.get("PIPX_HOME"), "venvs")):
            return Install("pipx", python, location)
        if not forced and ("/uv/tools/" in text or _under(prefix, env.get("UV_TOOL_DIR"), "")):
            return Install("uv", python, location)
        if sys.prefix != sys.base_prefix:
            return Install("venv", python, location)
        return Install(
            "system",
            python,
            location,
            f"tether is installed in the system Python ({sys.prefix}); update it with "
            "the tool that installed it, or reinstall with `pipx install tether`",
        )
    raise UpdateError(f"TETHER_PACKAGE_MANAGER={forced!r}: use pipx, uv or pip")


def _under(path: Path, root: str | None, sub: str) -> bool:
    if not root:
        return False
    try:
        path.relative_to(Path(root).expanduser().resolve() / sub)
        return True
    except ValueError:
        return False


def _editable(location: Path) -> bool:
    for info in location.parent.glob("tether-*.dist-info"):
        direct = info / "direct_url.json"
        if direct.is_file() and '"editable": true' in direct.read_text().replace("'", '"'):
            return True
    return False


# --- updating ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    current: str
    latest: str | None
    installed: bool
    message: str


def index_url(env: Mapping[str, str]) -> str:
    return env.get("TETHER_UPDATE_INDEX_URL") or DEFAULT_INDEX


def package_name(env: Mapping[str, str]) -> str:
    return env.get("TETHER_UPDATE_PACKAGE_NAME") or "tether"


def update(
    env: Mapping[str, str], *, check_only: bool = False, log: IO[str] | None = None
) -> Outcome:
    """Bring tether to the index's newest stable version with the tool that installed it."""
    from tether import __version__ as current

    install = detect_install(env)
    if not install.updatable:
        raise UpdateError(f"tether does not update itself here: {install.why}")
    index, package = index_url(env), package_name(env)
    latest = latest_stable(versions_in_index(index, package))
    if latest is None:
        raise UpdateError(f"the package index {index} lists no stable release of {package}")
    if not newer(latest, current):
        return Outcome(current, latest, False, f"tether {current} is up to date ({index})")
    if check_only:
        return Outcome(
            current,
            latest,
            False,
            f"tether {latest} is available (you have {current}); run `tether update` to install it",
        )
    site = install.location.parent
    if install.kind == "venv" and not os.access(site, os.W_OK):
        raise UpdateError(
            f"cannot write to {site}: run `tether update` as the user who installed "
            "tether, or reinstall it with pipx"
        )
    argv = install.command(package, latest, None if index == DEFAULT_INDEX else index, env)
    _run_install(argv, install, latest, current, log)
    notice = f"tether updated from {current} to {latest} (with {install.kind})"
    if notable_bump(current, latest):
        notice += "; restart running tether sessions to use it"
    return Outcome(current, latest, True, notice)


def _run_install(
    argv: list[str], install: Install, latest: str, current: str, log: IO[str] | None
) -> None:
    import shlex
    import subprocess

    manual = shlex.join(argv)
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UpdateError(
            f"the installer did not finish ({exc}); tether {current} is still "
            f"installed. To retry by hand: {manual}"
        ) from None
    if log is not None:
        log.write(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-6:])
        raise UpdateError(
            f"installing tether {latest} with {install.kind} failed (exit {proc.returncode}):\n"
            f"{tail}\ntether {current} is still installed and working. To retry by hand: {manual}"
        )
    check = subprocess.run(
        [install.python, "-c", "import tether; print(tether.__version__)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check.returncode != 0 or check.stdout.strip() != latest:
        raise UpdateError(
            f"the installer finished but tether reports {check.stdout.strip() or 'an error'} "
            f"instead of {latest}: {check.stderr.strip()[-300:]}\nTo repair: {manual}"
        )


# --- the start-up check ----------------------------------------------------------------------------


def startup_check(env: Mapping[str, str], home: Path, err: IO[str] | None = None) -> None:
    """On a run's start: print what a background update did, and start one when a check is due.
    Never raises and never waits on the network."""
    try:
        _startup_check(env, home, err or sys.stderr)
    except Exception:  # an updater problem must never break a run
        return


def _startup_check(env: Mapping[str, str], home: Path, err: IO[str]) -> None:
    if env.get("DISABLE_AUTOUPDATER") == "1":
        return
    from tether import __version__

    if is_prerelease(__version__):
        return
    here = Path(__file__).parts
    if "site-packages" not in here and "dist-packages" not in here:
        return  # a source tree or editable install: never update it
    import orjson

    stamp = home / STAMP
    try:
        state = orjson.loads(stamp.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        state = {}
    now = int(time.time() * 1000)
    notice = state.pop("notice", None)
    due = now - int(state.get("checked_ms") or 0) >= CHECK_EVERY_MS
    if notice:
        err.write(f"tether: {notice}\n")
    if not notice and not due:
        return
    if due:
        state["checked_ms"] = now  # claimed before the child starts: one check a day
    _write_state(home, state)
    if due:
        _spawn_check(env, home)


def _spawn_check(env: Mapping[str, str], home: Path) -> None:
    import subprocess

    with open(home / "update.log", "ab") as log:
        subprocess.Popen(
            [sys.executable, "-m", "tether.runtime.updater", "--auto"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            env=dict(env),
            close_fds=True,
        )


def _auto(env: Mapping[str, str]) -> int:
    """The detached child: check, install when newer, leave a notice for the next start."""
    import orjson

    from tether.runtime.session.session import tether_home

    home = tether_home(env)
    try:
        outcome = update(env, log=sys.stdout)
    except UpdateError as exc:
        sys.stdout.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} update failed: {exc}\n")
        return 1
    sys.stdout.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {outcome.message}\n")
    if outcome.installed and outcome.latest and notable_bump(outcome.current, outcome.latest):
        stamp = home / STAMP
        try:
            state = orjson.loads(stamp.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            state = {}
        state["notice"] = outcome.message
        _write_state(home, state)
    return 0


def _write_state(home: Path, state: dict[str, object]) -> None:
    import orjson

    home.mkdir(parents=True, exist_ok=True)
    tmp = home / f"{STAMP}.{os.getpid()}"
    tmp.write_bytes(orjson.dumps(state))
    os.replace(tmp, home / STAMP)  # a reader sees the old state or the new, never half


if __name__ == "__main__":
    if sys.argv[1:] == ["--auto"]:
        sys.exit(_auto(os.environ))
    sys.stderr.write("usage: python -m tether.runtime.updater --auto (use `tether update`)\n")
    sys.exit(2)
