"""The command line: `tether` and its subcommands, the headless and stream-json run paths, and
the process's side of assembling a run (cwd, environment, signals, exit codes).
"""
