"""`tether store migrate | status`: a TETHER_HOME copied to a PostgreSQL store and back, verified
(issue 31 item 3), and what a store holds.

    tether store migrate --to postgresql://… [--from DIR]   a home (default $TETHER_HOME) into
                                                            an empty store
    tether store migrate --from postgresql://… --to DIR     the store's home into a new folder
    tether store status  --store postgresql://…             schema version and row counts

Both directions refuse a non-empty target, verify every file, record, transcript, database and
memory repository by digest before anything is committed, and print what was copied (JSON).
The store needs psycopg 3: pip install 'tether[postgres]'.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tether.cli.agents_cmd import print_json
from tether.errors import TetherError, UsageError

if TYPE_CHECKING:
    from tether.backends.postgres.connection import PgSession


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def run_store(argv: Sequence[str]) -> int:
    try:
        return _run(list(argv))
    except UsageError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 2
    except TetherError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1


def _is_url(value: str) -> bool:
    return "://" in value


def _store(option: str, url: str) -> PgSession:
    """A session on the store at `url`; a URL that is not PostgreSQL's named with its option."""
    from urllib.parse import urlsplit

    from tether.backends.postgres.connection import SCHEMES, PgSession, redact  # noqa: F811

    scheme = urlsplit(url).scheme
    if scheme not in SCHEMES:
        raise UsageError(
            f"tether store: {option} {redact(url)!r} is not a PostgreSQL URL: expected"
            f" postgresql://… (got scheme {scheme or 'none'!r})"
        )
    return PgSession(url, f"store-{os.getpid()}")


def _run(argv: list[str]) -> int:
    p = _Parser(prog="tether store", description=(__doc__ or "").splitlines()[0])
    sub = p.add_subparsers(dest="action", required=True)
    mig = sub.add_parser("migrate", help="copy a home into a store, or a store into a new home")
    mig.add_argument("--to", required=True, metavar="URL|DIR")
    mig.add_argument("--from", dest="source", metavar="DIR|URL")
    status = sub.add_parser("status", help="a store's schema version and row counts")
    status.add_argument("--store", required=True, metavar="URL")
    ns = p.parse_args(argv)

    from tether.backends.postgres import migrate_home

    if ns.action == "status":
        session = _store("--store", ns.store)
        try:
            print_json(migrate_home.store_status(session))
        finally:
            session.close()
        return 0
    source = ns.source
    if _is_url(ns.to):
        if source is not None and _is_url(source):
            raise UsageError("tether store migrate: --from and --to are both URLs: one must be a folder")
        from tether.runtime.session.session import tether_home

        home = Path(source).expanduser() if source is not None else tether_home(os.environ)
        session = _store("--to", ns.to)
        try:
            report = migrate_home.home_to_store(home, session)
        finally:
            session.close()
        print_json({"from": str(home), "to": _redacted(ns.to), **report.to_dict()})
        return 0
    if source is None or not _is_url(source):
        raise UsageError(
            "tether store migrate: one side must be a postgresql:// URL"
            " (--to URL [--from DIR], or --from URL --to DIR)"
        )
    session = _store("--from", source)
    target = Path(ns.to).expanduser()
    try:
        report = migrate_home.store_to_home(session, target)
    finally:
        session.close()
    print_json({"from": _redacted(source), "to": str(target), **report.to_dict()})
    return 0


def _redacted(url: str) -> str:
    from tether.backends.postgres.connection import redact

    return redact(url)
