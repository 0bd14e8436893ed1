"""The sandbox package loads its names on first use: skill discovery's `sandbox.armed` (read on
every run) must not pull the probe, Landlock's ctypes or seccomp onto the start path."""

from __future__ import annotations

import subprocess
import sys

import tether.sandbox as sandbox


def test_every_exported_name_resolves_to_its_module_s_object() -> None:
    assert sorted(sandbox.__all__) == sorted(sandbox._MODULE_OF)
    for name in sandbox.__all__:
        module = sys.modules.get(f"tether.sandbox.{sandbox._MODULE_OF[name]}")
        value = getattr(sandbox, name)
        assert module is not None and getattr(module, name) is value


def test_probe_stays_the_function_after_its_module_is_imported_directly() -> None:
    code = (
        "import tether.sandbox.detect, tether.sandbox.policy\n"
        "from tether.sandbox import probe, wrap_command\n"
        "assert callable(probe) and probe.__module__ == 'tether.sandbox.detect', probe\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_importing_the_armed_names_loads_nothing_heavy() -> None:
    code = (
        "import sys\n"
        "import tether.sandbox.armed\n"
        "heavy = [m for m in ('tether.sandbox.detect', 'tether.sandbox.landlock',\n"
        "         'tether.sandbox.seccomp', 'ctypes') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
