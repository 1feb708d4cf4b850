"""Spark reprocessing of commit history with the shared rules."""
