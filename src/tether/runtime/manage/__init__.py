"""Managing what a tether home holds — agents, conversations, memory, skills — as plain functions
over the local store that the CLI and the App Server both call (one code path per feature).

Every function takes what it needs explicitly (the home, ids, fields), never the process
environment, returns JSON-ready dicts in the reference's shapes, and raises `UsageError`
(a bad field, named) or `NotFound` (an unknown id) before writing anything.

    agents.py         create, get, list (name, query, tags), update; memory blocks
    conversations.py  create, get, list, update (summary, archived); message search, transcripts
    memory_ops.py     opening an agent's memory; backups, restore, pending merges, tokens
    memory_files.py   memory files one at a time (list, read, write, delete, history)
    skills_ops.py     list, install (folder or git), delete
    removal.py        deleting an agent or conversation (refused while a turn runs)
    models_ops.py     models and providers as a client sees them
"""
