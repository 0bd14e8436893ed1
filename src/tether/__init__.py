"""tether: a stateful coding-agent runtime."""

__version__ = "0.1.0"
