"""The evaluator service (built by its own issue)."""
