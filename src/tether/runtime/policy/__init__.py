"""What a run may do: the session's permission policy, folder trust, the shell sandbox and the
read-only confinement of auto-allowed commands.
"""
