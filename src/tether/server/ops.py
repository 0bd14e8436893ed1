"""The App Server's operations surface (issue 31 item 4): what /healthz, /readyz and /metrics
answer, the process's counters (turns, provider latency, lease moves) and `--log-format json`
structured logs. A server on the local store answers without the database lines; one on a
PostgreSQL store (`--store`) asks the database itself (`backends/postgres/health.py`), each
probe on a connection of its own, so /readyz fails the moment the database does.

Who may ask: /healthz and /readyz are open (load balancers probe them without a credential, as
the reference's are, and they say only ok or why not); /metrics, which describes the whole
server (and on a store the whole fleet), needs the server's credential like /app-server-info,
and an unscoped one (`metrics_refusal`)."""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from tether.server.auth import Grant, Rejection

# Provider latency buckets (seconds): a request sent until its first answer event.
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# `tether.fleet` events that move work from one worker to another
FLEET_MOVES = ("lease_taken", "inputs_claimed", "scheduler_lease_taken", "fire_taken_over")
METRICS_SCOPED = "/metrics needs an unscoped token: it reports on the whole server"


@dataclass
class Metrics:
    """This process's counters; thread-safe (turns end on the loop, fleet events anywhere)."""

    turns: dict[str, int] = field(default_factory=dict)  # by stop reason
    latency_counts: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))
    latency_sum: float = 0.0
    latency_n: int = 0
    moves: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FLEET_MOVES, 0))
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def turn_finished(self, stop_reason: str) -> None:
        with self.lock:
            self.turns[stop_reason] = self.turns.get(stop_reason, 0) + 1

    def provider_answered(self, seconds: float) -> None:
        with self.lock:
            self.latency_sum += seconds
            self.latency_n += 1
            for i, bound in enumerate(BUCKETS):
                if seconds <= bound:
                    self.latency_counts[i] += 1

    def moved(self, event: str) -> None:
        with self.lock:
            self.moves[event] = self.moves.get(event, 0) + 1

    def text(self, queue_depth: int, runtimes: int) -> str:
        """The process's lines in Prometheus' text exposition format (0.0.4)."""
        with self.lock:
            out = [
                "# HELP tether_turns_total Turns finished by this server, by stop reason.",
                "# TYPE tether_turns_total counter",
                *(f'tether_turns_total{{stop_reason="{_label(k)}"}} {v}'
                  for k, v in sorted(self.turns.items())),
                "# HELP tether_queue_depth Inputs waiting in this server's conversations.",
                "# TYPE tether_queue_depth gauge",
                f"tether_queue_depth {queue_depth}",
                "# HELP tether_runtimes Conversation runtimes this server holds.",
                "# TYPE tether_runtimes gauge",
                f"tether_runtimes {runtimes}",
                "# HELP tether_provider_latency_seconds A model request sent until its first"
                " answer event.",
                "# TYPE tether_provider_latency_seconds histogram",
                *(f'tether_provider_latency_seconds_bucket{{le="{b}"}} {c}'
                  for b, c in zip(BUCKETS, self.latency_counts, strict=True)),
                f'tether_provider_latency_seconds_bucket{{le="+Inf"}} {self.latency_n}',
                f"tether_provider_latency_seconds_sum {self.latency_sum:.6f}",
                f"tether_provider_latency_seconds_count {self.latency_n}",
                "# HELP tether_lease_moves_total Conversations or inputs this server took over"
                " from another worker.",
                "# TYPE tether_lease_moves_total counter",
                *(f'tether_lease_moves_total{{event="{k}"}} {v}'
                  for k, v in sorted(self.moves.items())),
            ]
        return "\n".join(out) + "\n"


METRICS = Metrics()


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class _FleetCounter(logging.Handler):
    """Counts the fleet events that move work (whatever the log level or format)."""

    def emit(self, record: logging.LogRecord) -> None:
        event = (getattr(record, "fleet", None) or {}).get("event")
        if event in FLEET_MOVES:
            METRICS.moved(event)


def configure_logging(log_format: str) -> None:
    """`text` (default): warnings and fleet events as plain lines on stderr; `json`: every
    record of the `tether` loggers as one JSON object per line on stderr."""
    root = logging.getLogger("tether")
    root.setLevel(logging.INFO)
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        from tether.backends.postgres.logs import JsonLogFormatter

        handler.setFormatter(JsonLogFormatter())
    else:
        handler.setFormatter(logging.Formatter("tether: %(name)s: %(message)s"))
    root.addHandler(handler)
    logging.getLogger("tether.fleet").addHandler(_FleetCounter())


def metrics_refusal(checked: Rejection | Grant) -> Rejection | None:
    """Why a request for /metrics is refused (None: it may read them): the request's own
    rejection (no or a bad credential: 401), or 403 for a token scoped to some agents or
    conversations, which may not learn about the others."""
    if isinstance(checked, Rejection):
        return checked
    return Rejection(403, METRICS_SCOPED) if checked.scoped else None


def health(store_url: str | None) -> tuple[bool, str]:
    """(ready, why) for /readyz: always ready on the local store; on PostgreSQL, ready when the
    database answers with this tether's schema."""
    if store_url is None:
        return True, "ok"
    from tether.backends.postgres.health import probe

    h = probe(store_url)
    return h.ready, h.reason()


def metrics_text(store_url: str | None, queue_depths: Iterable[int], runtimes: int) -> str:
    text = METRICS.text(sum(queue_depths), runtimes)
    if store_url is not None:
        from tether.backends.postgres.health import prometheus_text

        text += prometheus_text(store_url)
    return text
