"""The notifier service (built by its own issue)."""
