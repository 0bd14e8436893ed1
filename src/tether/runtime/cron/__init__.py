"""Schedules (reference §13): `schedule.py` turns `--every/--at/--cron` into fire times with
cronsim, `store.py` keeps tasks, run logs, fires and the scheduler lease in SQLite under
TETHER_HOME, `scheduler.py` claims due slots and `delivery.py` carries each fire into its
conversation queue through a narrow `Submitter` seam, exactly once across a scheduler's death."""
