"""The interactive terminal UI: a Textual frontend on the same turn engine headless runs use.

Nothing here is imported unless `tether` starts interactively (textual costs ~200 ms to import).
"""
