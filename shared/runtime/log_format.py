"""How every lagwatch process writes its log: one line per record, whatever the names it quotes.

Log messages quote names from outside (consumer groups, topics, client ids, exception texts): a name holding a
line break or an escape sequence would otherwise forge a record of its own in the log, or drive the terminal that
shows it. So a record's line (time, level, logger, message with its arguments) goes through `printable`, which
writes each control character as an escape (`\\n`, `\\x1b`).

A traceback or stack keeps its line breaks (it is read as lines), but each of its lines is indented and has its
other control characters escaped: an exception text quoting a name can add a line to the traceback, never one
that looks like a record (every record's line, and only a record's line, starts in the first column).
"""

from __future__ import annotations

import logging

from lagwatch.shared.runtime.printable import printable

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
CONTINUATION = "  "  # before each line of a traceback or stack


class OneLineFormatter(logging.Formatter):
    """logging.Formatter's layout, with the record's line made one line and its traceback indented."""

    def format(self, record: logging.LogRecord) -> str:
        # Formatter.format's steps, without its cache of the traceback text: another handler's formatter may have
        # left one there unescaped
        record.message = record.getMessage()
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        lines = [printable(self.formatMessage(record))]
        trace = self.formatException(record.exc_info) if record.exc_info else record.exc_text
        if trace:
            lines.append(_continuation(trace))
        if record.stack_info:
            lines.append(_continuation(self.formatStack(record.stack_info)))
        return "\n".join(lines)


def _continuation(text: str) -> str:
    """A traceback's or a stack's lines, indented, each with its control characters escaped."""
    return "\n".join(CONTINUATION + printable(line) for line in text.rstrip("\n").split("\n"))


def configure_logging(level: str, filename: str | None = None) -> None:
    """The root logger writes `level` and above to `filename` (appending), or to stderr, one line per record.
    OSError when the file cannot be opened. As logging.basicConfig, it does nothing when the root logger has
    handlers already."""
    if logging.getLogger().handlers:
        return
    handler = logging.FileHandler(filename) if filename else logging.StreamHandler()
    handler.setFormatter(OneLineFormatter(FORMAT))
    logging.basicConfig(level=level, handlers=[handler])
