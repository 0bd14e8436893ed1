"""The agent and conversation records the local store keeps on disk, and their JSON shapes
(reference §4.2 field names).

`from_dict` is where bytes from disk become records, so it checks every field and names the
file on failure. Keys this version does not know (the reference's `hidden`,
`compaction_settings`, … or a newer tether's) are kept in `extra` and written back unchanged,
so saving a record never drops what another writer put there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tether.errors import ProtocolError


def utc_now_iso() -> str:
    # Microseconds so records created in one burst still sort by creation time.
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, slots=True)
class AgentRecord:
    id: str
    name: str
    description: str
    system: str
    tags: tuple[str, ...]
    model: str | None
    model_settings: dict[str, Any]
    created_at: str
    updated_at: str
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.extra,
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "system": self.system,
            "tags": list(self.tags),
            "model": self.model,
            "model_settings": self.model_settings,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }

    @classmethod
    def from_dict(cls, d: Any, where: str) -> AgentRecord:
        r = _Reader(d, where, "agent record")
        return cls(
            id=r.text("id"),
            name=r.text("name"),
            description=r.text("description"),
            system=r.text("system"),
            tags=r.texts("tags"),
            model=r.opt_text("model"),
            model_settings=r.mapping("model_settings"),
            created_at=r.text("created_at"),
            updated_at=r.text("updated_at"),
            extra=r.rest(),
        )


@dataclass(frozen=True, slots=True)
class ConversationRecord:
    id: str
    agent_id: str
    archived: bool
    archived_at: str | None
    created_at: str
    updated_at: str
    last_message_at: str | None
    summary: str | None
    in_context_message_ids: tuple[str, ...]
    model: str | None = None
    model_settings: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.extra,
            "id": self.id,
            "agent_id": self.agent_id,
            "archived": self.archived,
            "archived_at": self.archived_at,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "last_message_at": self.last_message_at,
            "summary": self.summary,
            "in_context_message_ids": list(self.in_context_message_ids),
            "model": self.model,
            "model_settings": self.model_settings,
        }

    @classmethod
    def from_dict(cls, d: Any, where: str) -> ConversationRecord:
        r = _Reader(d, where, "conversation record")
        return cls(
            id=r.text("id"),
            agent_id=r.text("agent_id"),
            archived=r.flag("archived"),
            archived_at=r.opt_text("archived_at"),
            created_at=r.text("created_at"),
            updated_at=r.text("updated_at"),
            last_message_at=r.opt_text("last_message_at"),
            summary=r.opt_text("summary"),
            in_context_message_ids=r.texts("in_context_message_ids"),
            # Optional in the reference (`model?`, `model_settings?`): absent means "inherit".
            model=r.opt_text("model", required=False),
            model_settings=r.mapping("model_settings", required=False),
            extra=r.rest(),
        )


class _Reader:
    """Typed field access on one decoded record; every failure names the file and the field."""

    def __init__(self, d: Any, where: str, what: str) -> None:
        if not isinstance(d, dict):
            raise ProtocolError(f"{where}: {what} must be a JSON object, got {type(d).__name__}")
        self.d = d
        self.where = where
        self.what = what
        self.seen: set[str] = set()

    def _get(self, key: str, required: bool) -> tuple[bool, Any]:
        self.seen.add(key)
        if key not in self.d:
            if required:
                raise ProtocolError(f"{self.where}: {self.what} lacks the field {key!r}")
            return False, None
        return True, self.d[key]

    def _wrong(self, key: str, expected: str, value: Any) -> ProtocolError:
        return ProtocolError(
            f"{self.where}: {self.what} field {key!r} must be {expected}, "
            f"got {type(value).__name__}"
        )

    def text(self, key: str) -> str:
        _, v = self._get(key, True)
        if not isinstance(v, str):
            raise self._wrong(key, "a string", v)
        return v

    def opt_text(self, key: str, required: bool = True) -> str | None:
        _, v = self._get(key, required)
        if v is not None and not isinstance(v, str):
            raise self._wrong(key, "a string or null", v)
        return v

    def flag(self, key: str) -> bool:
        _, v = self._get(key, True)
        if not isinstance(v, bool):
            raise self._wrong(key, "true or false", v)
        return v

    def mapping(self, key: str, required: bool = True) -> dict[str, Any]:
        present, v = self._get(key, required)
        if not present or (v is None and not required):
            return {}
        if not isinstance(v, dict):
            raise self._wrong(key, "an object", v)
        return v

    def texts(self, key: str) -> tuple[str, ...]:
        _, v = self._get(key, True)
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise self._wrong(key, "a list of strings", v)
        return tuple(v)

    def rest(self) -> dict[str, Any]:
        return {k: v for k, v in self.d.items() if k not in self.seen}
