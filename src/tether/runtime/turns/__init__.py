"""One conversation's turns, the same for every frontend: the inbox frontends submit to, the
turn driver, the durable input queue, effect checkpoints, plan mode and approval diffs.
"""
