"""Agents a run starts beside its own: subagents (the Task tool's child processes, their types,
targets and task log) and reflection (a subagent reviewing the conversation into memory).
"""
