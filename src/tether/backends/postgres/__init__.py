"""The PostgreSQL store for a fleet of App Servers (issue 31): one database shared by N
processes. `connection.py` the conninfo, sessions and errors; `schema.py` versioned migrations;
`presence.py` which workers are alive (their database session, not a clock); `input_queue.py`
`PgInputQueue`, the runtime's `InputQueue` on PostgreSQL; `leases.py` conversation leases with
fencing tokens and the fenced writes (inputs taken, marked, transcript rows appended);
`fires.py` a schedule's due time fired once across the fleet; `notify.py` LISTEN/NOTIFY, an
enqueued input waking its conversation's owner. psycopg (the `postgres` extra) is imported only
inside this package, so nothing here is on the start path of a local run."""
