"""The api service (built by its own issue)."""
