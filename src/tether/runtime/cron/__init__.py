"""Schedules (reference §13): `schedule.py` turns `--every/--at/--cron` into fire times with
cronsim, `store.py` keeps tasks, run logs and the scheduler lease in SQLite under TETHER_HOME,
`scheduler.py` fires due tasks into conversation queues through a narrow `Submitter` seam."""
