"""`tether trust`: let a folder's project settings (allow rules, hooks, mods, looser modes) apply.

    tether trust [PATH]            trust PATH (default: the working directory) as its files are now
    tether trust --revoke [PATH]   forget it
    tether trust --status [PATH]   trusted, untrusted, or changed since trusted (and which file:
                                   settings, .mcp.json, a mod, skill, agent or hook file, or a
                                   script a project hook runs)
    tether trust --list            every trusted folder
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from tether.errors import UsageError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"tether trust: {message}")


def run_trust(argv: Sequence[str]) -> int:
    from tether.runtime.policy.trust import TrustStore
    from tether.runtime.session.session import tether_home
    from tether.runtime.session.settings import load_settings

    parser = _Parser(prog="tether trust", description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", default=".")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--revoke", action="store_true")
    group.add_argument("--status", action="store_true")
    group.add_argument("--list", action="store_true")
    try:
        ns = parser.parse_args(list(argv))
        home = tether_home(os.environ)
        store = TrustStore(home)
        if ns.list:
            for name, entry in sorted(store.folders().items()):
                print(f"{name}\t{entry.get('trusted_at', '?')}")
            return 0
        folder = Path(ns.path).resolve()
        if not folder.is_dir():
            raise UsageError(f"tether trust: {ns.path} is not a directory")
        if ns.revoke:
            removed = store.revoke(folder)
            print(f"{'no longer trusted' if removed else 'was not trusted'}: {folder}")
            return 0
        if ns.status:
            state = store.state(folder)
            print(f"{state}: {folder}")
            if state == "changed":  # say which file, so the user knows what to review
                for line in store.explain(folder):
                    print(f"  {line}")
            return 0
        # Validate before recording: trusting a folder whose settings do not parse helps nobody.
        load_settings(home, folder, "trusted")
        store.trust(folder)
        print(f"trusted: {folder}")
        return 0
    except UsageError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1
