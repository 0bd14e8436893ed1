"""The cached `tether.mods` entry-point lookup, each run in a fresh interpreter so "was
importlib.metadata imported" and "which distributions exist" are that process's own answers."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from tether.runtime.extensions.mods.installed import cache_path, installed_mod_entry_points

PROBE = textwrap.dedent("""
    import sys
    from pathlib import Path

    import orjson

    from tether.runtime.extensions.mods.installed import installed_mod_entry_points

    before = "importlib.metadata" in sys.modules
    found = installed_mod_entry_points(Path(sys.argv[1]))
    after = "importlib.metadata" in sys.modules
    print(orjson.dumps({"found": found, "before": before, "after": after}).decode())
""")


class Sandbox:
    """A working directory and a `PYTHONPATH` folder whose mtimes are settled (older than the
    cache's settle window), so the first probe may write the cache."""

    def __init__(self, root: Path, home: Path) -> None:
        self.home = home
        self.cwd = root / "cwd"
        self.site = root / "site"
        self.cwd.mkdir()
        self.site.mkdir()
        self.settle(self.cwd, self.site)

    @staticmethod
    def settle(*paths: Path, age_s: int = 60) -> None:
        then = time.time_ns() - age_s * 1_000_000_000
        for path in paths:
            os.utime(path, ns=(then, then))

    def probe(self) -> dict[str, Any]:
        env = {**os.environ, "PYTHONPATH": str(self.site)}
        done = subprocess.run(
            [sys.executable, "-c", PROBE, str(self.home)],
            cwd=self.cwd,
            env=env,
            capture_output=True,
            timeout=60,
            check=True,
        )
        result: dict[str, Any] = orjson.loads(done.stdout)
        assert not result["before"], "importlib.metadata was imported before the lookup ran"
        return result

    def add_distribution(self) -> None:
        info = self.site / "fake_mod-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-mod\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text("[tether.mods]\nfake = fake_mod:Mod\n")


@pytest.fixture
def sandbox(tmp_path: Path, tether_home: Path) -> Sandbox:
    return Sandbox(tmp_path, tether_home)


def test_a_hit_does_not_import_importlib_metadata(sandbox: Sandbox) -> None:
    first = sandbox.probe()
    assert first["after"]  # a miss: scanned the distributions
    assert cache_path(sandbox.home).is_file()
    second = sandbox.probe()
    assert not second["after"]
    assert second["found"] == first["found"]


def test_a_new_distribution_invalidates_the_cache(sandbox: Sandbox) -> None:
    assert ["fake", "fake_mod:Mod"] not in sandbox.probe()["found"]
    assert cache_path(sandbox.home).is_file()
    sandbox.add_distribution()  # changes the site folder's mtime
    found = sandbox.probe()
    assert found["after"] and ["fake", "fake_mod:Mod"] in found["found"]
    # Once the folder has settled, the entry is cached and served without a scan.
    sandbox.settle(sandbox.site, age_s=30)
    assert ["fake", "fake_mod:Mod"] in sandbox.probe()["found"]
    hit = sandbox.probe()
    assert not hit["after"] and ["fake", "fake_mod:Mod"] in hit["found"]


def test_a_removed_distribution_invalidates_the_cache(sandbox: Sandbox) -> None:
    sandbox.add_distribution()
    sandbox.settle(sandbox.site)
    assert ["fake", "fake_mod:Mod"] in sandbox.probe()["found"]
    info = sandbox.site / "fake_mod-1.0.dist-info"
    for child in info.iterdir():
        child.unlink()
    info.rmdir()
    found = sandbox.probe()
    assert found["after"] and ["fake", "fake_mod:Mod"] not in found["found"]


def _wrong_shape(good: dict[str, Any]) -> bytes:
    return orjson.dumps({**good, "entry_points": [["only a name"]]})


@pytest.mark.parametrize(
    "damage",
    [
        lambda good: b"{not json",
        lambda good: b"",
        lambda good: b"[1, 2]",
        lambda good: orjson.dumps({**good, "version": 99}),
        _wrong_shape,
    ],
    ids=["corrupt", "empty", "not-an-object", "other-version", "wrong-shape"],
)
def test_a_damaged_cache_is_ignored_and_replaced(sandbox: Sandbox, damage: Any) -> None:
    sandbox.add_distribution()
    sandbox.settle(sandbox.site)
    expected = sandbox.probe()["found"]
    path = cache_path(sandbox.home)
    good = orjson.loads(path.read_bytes())
    path.write_bytes(damage(good))
    again = sandbox.probe()
    assert again["after"] and again["found"] == expected
    assert orjson.loads(path.read_bytes()) == good
    assert not sandbox.probe()["after"]


def test_an_unwritable_cache_folder_still_answers(tether_home: Path) -> None:
    tether_home.mkdir(parents=True)
    (tether_home / "cache").write_text("a file where the cache folder should be")
    from importlib.metadata import entry_points

    expected = [(ep.name, ep.value) for ep in entry_points(group="tether.mods")]
    assert installed_mod_entry_points(tether_home) == expected
    assert installed_mod_entry_points(tether_home) == expected
