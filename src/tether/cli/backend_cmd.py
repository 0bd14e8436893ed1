"""`tether backend [local|cloud]`: show or save which backend runs use by default."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

USAGE = """Usage:
  tether backend              Show the saved default backend
  tether backend cloud        Use a Letta server (LETTA_BASE_URL, default Letta Cloud) by default
  tether backend local        Use the local backend by default

Use --backend cloud or --backend local for a one-off override without changing the saved
default. `api` is accepted as another name for `cloud`."""


def run_backend(argv: Sequence[str]) -> int:
    from tether.errors import UsageError
    from tether.runtime.session.backend_choice import (
        letta_server,
        parse_backend,
        save_backend,
        saved_backend,
    )
    from tether.runtime.session.session import tether_home

    args = list(argv)
    if args and args[0] in ("help", "--help", "-h"):
        sys.stdout.write(USAGE + "\n")
        return 0
    home = tether_home(os.environ)
    try:
        if not args:
            mode = saved_backend(home) or "local"
            if mode == "cloud":
                where = letta_server(os.environ, home).base_url
                sys.stdout.write(f"Default backend: Letta server at {where} (cloud)\n")
            else:
                sys.stdout.write("Default backend: local mode (local)\n")
            sys.stdout.write("Run `tether backend cloud` or `tether backend local` to change it.\n")
            return 0
        if len(args) > 1:
            raise UsageError(f"Unexpected arguments: {' '.join(args[1:])}\n{USAGE}")
        mode = parse_backend(args[0], "tether backend")
        save_backend(home, mode)
    except UsageError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1
    if mode == "cloud":
        where = letta_server(os.environ, home).base_url
        sys.stdout.write(f"Default backend set to the Letta server at {where} (cloud).\n")
    else:
        sys.stdout.write("Default backend set to local mode.\n")
    sys.stdout.write("Use `--backend cloud` or `--backend local` for a one-off override.\n")
    return 0
