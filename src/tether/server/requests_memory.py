"""The memory requests (reference §12.3: `list_memory`, `read_memory_file`,
`write_memory_file`, `delete_memory_file`, `memory_history`, `memory_commit_diff`,
`memory_file_at_ref`, `enable_memfs`) over `runtime/manage/memory_files`,
each for an agent the token grants (else the not-found answer); a write or delete is one commit
in the agent's memory repository and tells the agent's clients `memory_updated`."""

from __future__ import annotations

from typing import Any

from tether.runtime.manage import memory_files
from tether.server.request_kit import Call, Request, Scope, request


def _agent_id(call: Call) -> str:
    assert call.agent_record is not None  # Scope.AGENT looked it up
    return call.agent_record.id


def list_memory(call: Call) -> dict[str, Any]:
    call.flag("include_references")  # checked; references are not parsed yet (none are sent)
    return {**memory_files.list_files(call.store, _agent_id(call)), "done": True}


def read_memory_file(call: Call) -> dict[str, Any]:
    return memory_files.read_file(
        call.store, _agent_id(call), call.text("path"), call.opt_text("encoding") or "utf8"
    )


def write_memory_file(call: Call) -> dict[str, Any]:
    content = call.frame.msg.get("content")
    if not isinstance(content, str):
        raise call.read.fail("content", "is required (a string)")
    out = memory_files.write_file(
        call.store, _agent_id(call), call.text("path"), content,
        encoding=call.opt_text("encoding") or "utf8", message=call.opt_text("commit_message"),
    )
    if out["committed"]:
        call.notify("memory_updated", agent_id=out["agent_id"], affected_paths=[out["path"]])
    return out


def delete_memory_file(call: Call) -> dict[str, Any]:
    out = memory_files.delete_file(
        call.store, _agent_id(call), call.text("path"), message=call.opt_text("commit_message")
    )
    if out["committed"]:
        call.notify("memory_updated", agent_id=out["agent_id"], affected_paths=[out["path"]])
    return out


def memory_history(call: Call) -> dict[str, Any]:
    return memory_files.history(
        call.store, _agent_id(call), call.opt_text("file_path"), call.count("limit", 50)
    )


def memory_commit_diff(call: Call) -> dict[str, Any]:
    return memory_files.commit_diff(call.store, _agent_id(call), call.text("sha"))


def memory_file_at_ref(call: Call) -> dict[str, Any]:
    return memory_files.file_at_ref(call.store, _agent_id(call), call.text("file_path"),
                                    call.text("ref"))


def enable_memfs(call: Call) -> dict[str, Any]:
    return memory_files.enable(call.store, _agent_id(call))


_ENTRIES = {"entries": [], "done": True, "total": 0}
_FILE = {"content": None}

FAMILY: dict[str, Request] = {
    "list_memory": request("agent_id include_references", list_memory, Scope.AGENT, _ENTRIES,
                           blocking=True),
    "read_memory_file": request("agent_id path encoding", read_memory_file, Scope.AGENT,
                                {**_FILE, "encoding": "utf8"}, blocking=True,
                                echo=("agent_id", "path")),
    "write_memory_file": request("agent_id path content encoding commit_message",
                                 write_memory_file, Scope.AGENT, blocking=True,
                                 echo=("agent_id", "path")),
    "delete_memory_file": request("agent_id path commit_message", delete_memory_file,
                                  Scope.AGENT, blocking=True, echo=("agent_id", "path")),
    "memory_history": request("agent_id file_path limit", memory_history, Scope.AGENT,
                              {"commits": []}, blocking=True, echo=("file_path",)),
    "memory_commit_diff": request("agent_id sha", memory_commit_diff, Scope.AGENT,
                                  {"diff": None}, blocking=True, echo=("sha",)),
    "memory_file_at_ref": request("agent_id file_path ref", memory_file_at_ref, Scope.AGENT,
                                  {"content": None}, blocking=True, echo=("file_path", "ref")),
    "enable_memfs": request("agent_id", enable_memfs, Scope.AGENT, blocking=True),
}
