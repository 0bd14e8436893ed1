"""The turn engine, with no I/O of its own: the turn loop, approval classification, the permission
decision, the tool registry and batch execution, prompt compilation and compaction planning.
"""
