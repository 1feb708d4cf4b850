"""The ingest service (built by its own issue)."""
