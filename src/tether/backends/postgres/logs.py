"""The fleet's structured logs (issue 31 item 4): what changes hands in the store, logged on the
`tether.fleet` logger with its fields as `fleet` on the record, and `JsonLogFormatter`, which
renders any record as one JSON line (time, level, logger, message, and those fields).

The events: `lease_taken` (a conversation's lease from an expired or dead holder, `leases.py`),
`write_refused` (a fenced write of a worker whose lease moved: lease, transcript, checkpoint;
a gateway's write to a message another gateway handles), `inputs_claimed` (a dead worker's
inputs, `input_queue.py`), `scheduler_lease_taken`, `fire_claimed`, `fire_taken_over` and
`fire_moved` (a schedule's fire, `fires.py` `CronFires`), `schedule_fired` (`ScheduleFires`)."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger("tether.fleet")


def event(name: str, message: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log `name` with `fields` (JSON-able) on the fleet logger."""
    if log.isEnabledFor(level):
        log.log(level, message, extra={"fleet": {"event": name, **fields}})


class JsonLogFormatter(logging.Formatter):
    """One JSON object per record; a fleet event's fields at the top level."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update(getattr(record, "fleet", None) or {})
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)
