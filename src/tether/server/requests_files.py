"""The workspace file requests (reference §12.3: `list_in_directory`, `read_file`, `get_tree`,
`search_files`, `grep_in_files`, `get_cwd_map`, and for unscoped connections `write_file`,
`edit_file` and `file_ops`) over `runtime/manage/files_ops`: a connection reads only inside the
working directories of the runtimes it started (and, unscoped, the server's own `--cwd`), within
the Read tool's boundary, and writes under the same checks on the real path (no `..` or symlink
out of the workspace, nothing of `$TETHER_HOME`).

`file_ops` is the reference's collaborative-editing frame (Egwalker ops, no response): like the
reference, the server writes the `document_content` the client sends with them; ops without it
are refused with an `error` frame (the reference drops them silently) rather than guessed at.
After an `edit_file` the server sends the edited document back as a `file_ops` frame, before
the `edit_file_response`, as the reference does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tether.errors import UsageError
from tether.runtime.manage import files_ops
from tether.server.request_kit import Call, Request, Scope, request


def workspace(call: Call) -> files_ops.Workspace:
    roots: list[Path] = [rt.p.cwd for rt in call.conn.runtimes.values()]
    if not call.grant.scoped:
        roots.append(call.server.ctx.default_cwd)
    return files_ops.Workspace(list(dict.fromkeys(roots)), call.home)


def list_in_directory(call: Call) -> dict[str, Any]:
    return files_ops.list_directory(
        workspace(call), call.text("path"), include_files=call.flag("include_files"),
        limit=call.count("limit", 1000), offset=call.count("offset", 0, least=0, most=10**9),
    )


def read_file(call: Call) -> dict[str, Any]:
    return files_ops.read_file(workspace(call), call.text("path"))


def get_tree(call: Call) -> dict[str, Any]:
    return files_ops.tree(workspace(call), call.text("path"), call.count("depth", 3, most=20))


def search_files(call: Call) -> dict[str, Any]:
    query = call.frame.msg.get("query", "")
    if not isinstance(query, str):
        raise call.read.fail("query", "must be a string")
    return files_ops.search(workspace(call), query, max_results=call.count("max_results", 5),
                            cwd=call.opt_text("cwd"))


def grep_in_files(call: Call) -> dict[str, Any]:
    from tether.runtime.manage.files_grep import grep

    query = call.frame.msg.get("query")
    if not isinstance(query, str):
        raise call.read.fail("query", "is required (a string)")
    glob = call.frame.msg.get("glob") or ""
    if not isinstance(glob, str):
        raise call.read.fail("glob", "must be a string such as *.py")
    return grep(workspace(call), query, is_regex=call.flag("is_regex"),
                case_sensitive=call.flag("case_sensitive"), whole_word=call.flag("whole_word"),
                glob=glob, cwd=call.opt_text("cwd"), max_results=call.count("max_results", 500),
                context_lines=call.count("context_lines", 2, least=0, most=50))


def scope_key(agent_id: str, conversation_id: str) -> str:
    """The reference's working-directory scope key (listener/cwd.ts): a conversation by its id,
    the `default` placeholder by its agent."""
    if conversation_id == "default":
        return f"agent:{agent_id}::conversation:default"
    return f"conversation:{conversation_id}"


def get_cwd_map(call: Call) -> dict[str, Any]:
    """The working directory of every conversation this server holds a runtime for (running,
    or released while idle), those the token reaches only; the boot directory for the
    server's operator (a scoped client is not shown the server's own folder)."""
    folders: dict[str, str] = {}
    held = [(scope, kept.cwd) for scope, kept in call.server.ctx.released.items()]
    held += [(scope, rt.p.cwd) for scope, rt in call.server.runtimes.items()]
    for scope, cwd in held:
        if call.grant.refusal(scope.agent_id, scope.conversation_id) is None and (
                call.sees_agent(scope.agent_id)):
            folders[scope_key(scope.agent_id, scope.conversation_id)] = str(cwd)
    boot = None if call.grant.scoped else str(call.server.ctx.default_cwd)
    return {"cwd_map": folders, "boot_working_directory": boot}


def write_file(call: Call) -> dict[str, Any]:
    content = call.frame.msg.get("content")
    if not isinstance(content, str):
        raise call.read.fail("content", "is required (a string)")
    return files_ops.write_file(workspace(call), call.text("path"), content)


def edit_file(call: Call) -> dict[str, Any]:
    new = call.frame.msg.get("new_string")
    if not isinstance(new, str):
        raise call.read.fail("new_string", "is required (a string)")
    from tether.server import v2_frames

    expected = call.frame.msg.get("expected_replacements")
    ws = workspace(call)
    done = files_ops.edit_file(
        ws, call.text("file_path"), call.text("old_string"), new,
        replace_all=call.flag("replace_all"),
        expected=call.count("expected_replacements", 1) if expected is not None else None,
    )
    # As the reference: the edited document to this client, before the answer, as `file_ops`.
    try:
        content = files_ops.read_file(ws, done["file_path"]).get("content")
    except UsageError:  # e.g. grown past what read_file serves: the edit still stands
        content = None
    if isinstance(content, str):
        call.replies.append(v2_frames.file_ops(done["file_path"], content))
    return done


def file_ops(call: Call) -> dict[str, Any]:
    for name in ("cg_entries", "ops"):
        if not isinstance(call.frame.msg.get(name), list):
            raise call.read.fail(name, "is required (a list)")
    for op in call.frame.msg["ops"]:
        if (not isinstance(op, dict) or op.get("type") not in ("ins", "del")
                or isinstance(op.get("pos"), bool) or not isinstance(op.get("pos"), int)):
            raise call.read.fail("ops", "must be {type: ins|del, pos, content?} objects")
    call.text("source")
    content = call.frame.msg.get("document_content")
    if content is None:
        raise call.read.fail("document_content", "is required: this server writes the whole "
                             "document the ops produced, and does not replay ops alone")
    if not isinstance(content, str):
        raise call.read.fail("document_content", "must be a string")
    files_ops.write_file(workspace(call), call.text("path"), content)
    return {}


FAMILY: dict[str, Request] = {
    # Writes bypass the permission system: the server's operator (an unscoped token) only.
    "write_file": request("path content", write_file, Scope.UNSCOPED, blocking=True,
                          echo=("path",)),
    "edit_file": request("file_path old_string new_string replace_all expected_replacements",
                         edit_file, Scope.UNSCOPED, {"message": None, "replacements": 0},
                         blocking=True, echo=("file_path",)),
    "file_ops": request("path cg_entries ops source document_content", file_ops,
                        Scope.UNSCOPED, blocking=True, answered=False),
    "search_files": request("query max_results cwd", search_files, Scope.OWN, {"files": []},
                            blocking=True),
    "grep_in_files": request(
        "query is_regex case_sensitive whole_word glob cwd max_results context_lines",
        grep_in_files, Scope.OWN,
        {"matches": [], "total_matches": 0, "total_files": 0, "truncated": False}, blocking=True,
    ),
    "get_cwd_map": request("", get_cwd_map, Scope.LISTED,
                           {"cwd_map": {}, "boot_working_directory": None}),
    "list_in_directory": request(
        "path include_files limit offset", list_in_directory, Scope.OWN,
        {"folders": [], "hasMore": False}, blocking=True, echo=("path",),
    ),
    "read_file": request("path", read_file, Scope.OWN, {"content": None}, blocking=True,
                         echo=("path",)),
    "get_tree": request("path depth", get_tree, Scope.OWN,
                        {"entries": [], "has_more_depth": False}, blocking=True, echo=("path",)),
}
