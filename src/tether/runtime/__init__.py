"""The wiring between the frontends and the adapters, in packages:

- `session/` assembling a run (flags, settings, backend, agent and conversation, prompt);
- `turns/` one conversation's turns for every frontend (inbox, driver, input queue, checkpoints);
- `extensions/` hooks, mods and skills;
- `agents/` subagents and reflection;
- `policy/` the permission policy, folder trust, the sandbox and confinement;
- `cron/` schedules; `manage/` what a home holds, for the CLI and the App Server;
- `updater.py` self-update; `channel_files.py` and `channel_catalog.py` the chat channels' files and catalog, shared by the gateway and the App Server.
"""
