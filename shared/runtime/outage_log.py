"""A dependency's outage as a few log lines, not one per retry.

A loop that retries while Redis or Kafka is away would log every retry, and the first line — what failed, and when
— would scroll away. An `OutageLog` says it when the outage begins (warning), again every REMIND_S while it lasts
(warning: for how long, how many retries failed, the latest error), and once when it is over (info: how long it
lasted); the retries in between go to debug.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

REMIND_S = 300.0  # a lasting outage is said again this often: its first line may have rotated out of the logs


class OutageLog:
    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        ended: str | None = None,
        remind_s: float = REMIND_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.what = what  # what fails, e.g. "evaluator prod: schedule unreadable"
        self.ended = ended or f"{what}: over"  # the line that says it is over ("... after 42 s")
        self.remind_s = remind_s
        self.clock = clock
        self.failures = 0
        self._since = 0.0
        self._said_at = 0.0

    def failed(self, error: object, retry: str = "retrying", *, news: bool = False) -> None:
        """One more failed try; `retry` says what happens next (e.g. "retrying in 2.5s"). `news`: it fails in a new
        way (more of it is away), said as its beginning is."""
        now = self.clock()
        self.failures += 1
        if self.failures == 1 or news:
            self._since = now if self.failures == 1 else self._since
            self._said_at = now
            self.logger.warning("%s (%s); %s", self.what, error, retry)
        elif now - self._said_at >= self.remind_s:
            self._said_at = now
            self.logger.warning(
                "%s for %.0f s now (%d tries failed; %s); %s", self.what, now - self._since, self.failures, error, retry
            )
        else:
            self.logger.debug("%s (%s); %s", self.what, error, retry)

    def reset(self) -> None:
        """Forget an outage going on without a line (what it was about is no longer this process's to say)."""
        self.failures = 0

    def ok(self) -> None:
        """A try succeeded: an outage going on is over."""
        if self.failures:
            self.logger.info("%s after %.0f s (%d tries failed)", self.ended, self.clock() - self._since, self.failures)
            self.failures = 0
