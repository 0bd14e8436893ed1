"""Managing what a tether home holds — agents, conversations, memory, skills — as plain functions
over the local store that the CLI and the App Server both call (one code path per feature).

Every function takes what it needs explicitly (the home, ids, fields), never the process
environment, returns JSON-ready dicts in the reference's shapes, and raises `UsageError`
(a bad field, named) or `NotFound` (an unknown id) before writing anything.

    agents.py         create, get, list (name, query, tags), update; memory blocks
    conversations.py  create, get, list, update (summary, archived); message search, transcripts
    memory_ops.py     memory files (list, read, write, delete), backups, restore, merges, tokens
    skills_ops.py     list, install (folder or git), delete
    trash.py          deleting an agent or conversation: moved whole to $TETHER_HOME/trash
"""
