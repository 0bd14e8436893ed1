"""Assembling a run's session: the user's choices (flags, settings), the backend, the agent and
conversation it uses, the compiled system prompt and the start-up heap policy.
"""
