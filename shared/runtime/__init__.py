"""A service process's life: stop-aware pauses and the one backoff, the health server every service runs, and how
refused HTTP requests are logged."""
