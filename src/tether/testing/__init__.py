"""Fakes shipped for tests: a loopback model provider speaking every supported dialect from a
script, with faults and invariant checks.
"""
