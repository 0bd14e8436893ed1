"""`python -m tether`: the same entry as the console script (used to launch subagents)."""

from tether.cli.main import entry

entry()
