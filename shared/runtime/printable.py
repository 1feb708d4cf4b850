"""Names from outside lagwatch (consumer groups, topics, client ids, and the exception texts quoting them) made safe
to show where a line break means something: a log line, a mail header, a terminal.

Anyone who can commit offsets names a consumer group, and Kafka allows any characters in a group's name. A line
break in it would start a line of its own (a forged log record, a forged mail header); an escape sequence would
drive the terminal showing it (colours, a cleared screen, a hidden line). `printable` writes every control
character as its Python escape (`\\n`, `\\x1b`, `\\x9b`, `\\u2028`), visible and on the same line; everything else,
non-ASCII letters included, is kept as it is.
"""

from __future__ import annotations

import re

# C0 and C1 controls, DEL, and the Unicode line and paragraph separators (which some viewers break lines on)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    return _CONTROL.sub(_escape, text)


def _escape(control: re.Match[str]) -> str:
    return repr(control.group())[1:-1]  # Python's own spelling: "\n" -> "\\n", "\x1b" -> "\\x1b"
