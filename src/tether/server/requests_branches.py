"""The git branch requests (reference §12.3: `search_branches`, `checkout_branch`) over
`runtime/manage/branches_ops`, in one of the connection's workspaces (`cwd`, else its first).
Git runs unconfined with the repository's own hooks and config, so only unscoped connections
may ask."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tether.runtime.manage import branches_ops
from tether.server.request_kit import Call, Request, Scope, request


def _cwd(call: Call) -> Path:
    from tether.server.requests_files import workspace

    ws = workspace(call)
    given = call.opt_text("cwd") or (ws.roots[0] if ws.roots else None)
    return Path(ws.check(given, "cwd")[1])


def search_branches(call: Call) -> dict[str, Any]:
    query = call.frame.msg.get("query", "")
    if not isinstance(query, str):
        raise call.read.fail("query", "must be a string")
    return {"branches": branches_ops.search_branches(_cwd(call), query,
                                                     call.count("max_results", 20))}


def checkout_branch(call: Call) -> dict[str, Any]:
    branch = call.text("branch")
    return {"branch": branches_ops.checkout_branch(_cwd(call), branch,
                                                   create=call.flag("create"))}


FAMILY: dict[str, Request] = {
    "search_branches": request("query max_results cwd", search_branches, Scope.UNSCOPED,
                               {"branches": []}, blocking=True),
    "checkout_branch": request("branch create cwd", checkout_branch, Scope.UNSCOPED,
                               blocking=True, echo=("branch",)),
}
