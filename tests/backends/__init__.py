"""Tests for tether.backends."""
