"""Attacks as data: real `tether` runs, effects checked on disk."""
