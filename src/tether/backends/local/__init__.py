"""backends/local."""
