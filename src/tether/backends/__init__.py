"""Where conversations live and how one send becomes a model step: `local/` (files and SQLite
under TETHER_HOME, the default), `api/` (a hosted Letta server), `postgres/` (a fleet's shared store).
"""
