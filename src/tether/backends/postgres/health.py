"""What a fleet server's operations endpoints say about the database (issue 31 item 4): a probe
for /healthz and /readyz (reachable; schema at this tether's version) and the store's gauges in
Prometheus' text format for /metrics, each read on a short-lived connection of its own so a
stuck worker session never makes the server look healthy."""

from __future__ import annotations

from dataclasses import dataclass

from tether.backends.postgres import schema
from tether.backends.postgres.connection import PgStoreUnavailable, connect, store_errors
from tether.backends.postgres.presence import ALIVE

STATES = ("queued", "started", "done", "cancelled", "interrupted", "not_run")


@dataclass(frozen=True, slots=True)
class Health:
    reachable: bool
    schema_version: int  # 0 when unreachable or never migrated
    expected_version: int
    error: str | None = None

    @property
    def ready(self) -> bool:
        """Serving is safe: the database answers and has this tether's schema."""
        return self.reachable and self.schema_version == self.expected_version

    def reason(self) -> str:
        if not self.reachable:
            return f"the database is unreachable: {self.error}"
        if self.schema_version != self.expected_version:
            return (f"the database has schema version {self.schema_version}, this tether"
                    f" needs {self.expected_version}")
        return "ok"


def probe(url: str) -> Health:
    """One round trip: never raises for an unreachable database, it says so."""
    expected = len(schema.MIGRATIONS)
    try:
        conn = connect(url)
    except PgStoreUnavailable as exc:
        return Health(False, 0, expected, str(exc))
    try:
        with store_errors(url, "answer a health probe"):
            return Health(True, schema.current_version(conn), expected)
    except PgStoreUnavailable as exc:
        return Health(False, 0, expected, str(exc))
    finally:
        conn.close()


def prometheus_text(url: str) -> str:
    """The store's gauges: up, schema version, live workers, leases held unexpired, and inputs
    per state. An unreachable database is `tether_store_up 0` and nothing else."""
    health = probe(url)
    lines = [
        "# HELP tether_store_up Whether the PostgreSQL store answers (1) or not (0).",
        "# TYPE tether_store_up gauge",
        f"tether_store_up {int(health.reachable)}",
    ]
    if not health.ready:
        return "\n".join(lines) + "\n"
    conn = connect(url)
    try:
        with store_errors(url, "read the store's gauges"):
            workers = conn.execute(
                "SELECT count(*) FROM workers o WHERE " + ALIVE.format(w="o.worker")
            ).fetchone()
            leases = conn.execute(
                "SELECT count(*) FROM conversation_leases WHERE expires_at > clock_timestamp()"
            ).fetchone()
            counts = dict(conn.execute("SELECT state, count(*) FROM inputs GROUP BY state").fetchall())
    finally:
        conn.close()
    lines += [
        "# HELP tether_store_schema_version The store's schema version.",
        "# TYPE tether_store_schema_version gauge",
        f"tether_store_schema_version {health.schema_version}",
        "# HELP tether_workers_alive Workers whose database session is live.",
        "# TYPE tether_workers_alive gauge",
        f"tether_workers_alive {workers[0] if workers else 0}",
        "# HELP tether_conversation_leases Conversation leases held and unexpired.",
        "# TYPE tether_conversation_leases gauge",
        f"tether_conversation_leases {leases[0] if leases else 0}",
        "# HELP tether_inputs Durable inputs by state.",
        "# TYPE tether_inputs gauge",
        *(f'tether_inputs{{state="{s}"}} {int(counts.get(s, 0))}' for s in STATES),
    ]
    return "\n".join(lines) + "\n"

