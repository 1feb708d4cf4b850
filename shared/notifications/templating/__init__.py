"""Notification templates, as the api checks them and the notifier renders them: Jinja2 in its sandbox with
lagwatch's and Burrow's helpers (templates.py, burrow_helpers.py), compiled and rendered only in budgeted worker
processes (template_worker.py)."""
