"""The built-in tools the model calls (shell and background tasks, files, search, memory, todo,
plans, web) and the guards every file path passes.
"""
