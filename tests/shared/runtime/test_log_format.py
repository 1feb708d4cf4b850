"""Every lagwatch process logs one line per record, whatever names a record quotes (shared/runtime/log_format.py).
`lagwatch run <service>` set up so: tests/system/test_hostile_names_end_to_end.py."""

import logging
import re
import sys

from lagwatch.shared.runtime.log_format import FORMAT, OneLineFormatter

HOSTILE = "billing\n2030-01-01 00:00:00,000 ERROR lagwatch: forged\x1b[2J\r"
RECORD_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ ")


def record(msg, *args, exc_info=None):
    return logging.LogRecord("lagwatch.test", logging.ERROR, __file__, 1, msg, args, exc_info)


def failure(text):
    try:
        raise ValueError(text)
    except ValueError:
        return sys.exc_info()


def test_a_records_arguments_cannot_add_a_line_or_an_escape_sequence():
    line = OneLineFormatter(FORMAT).format(record("%s/%s: -> %s", "local", HOSTILE, "OK"))
    assert "\n" not in line and "\r" not in line and "\x1b" not in line
    assert line.endswith("ERROR lagwatch.test: local/billing\\n2030-01-01 00:00:00,000 ERROR lagwatch: forged"
                         "\\x1b[2J\\r: -> OK")  # fmt: skip


def test_a_traceback_keeps_its_lines_but_none_of_them_looks_like_a_record():
    text = OneLineFormatter(FORMAT).format(record("delivery of %s failed", HOSTILE, exc_info=failure(HOSTILE)))
    first, *trace = text.split("\n")
    assert RECORD_LINE.match(first) and "\\n" in first
    assert trace[0] == "  Traceback (most recent call last):" and trace[1].startswith("    File ")
    assert trace[-2:] == ["  ValueError: billing", "  2030-01-01 00:00:00,000 ERROR lagwatch: forged\\x1b[2J\\r"]
    assert not any(RECORD_LINE.match(line) for line in trace)
    assert "\x1b" not in text and "\r" not in text


def test_a_traceback_text_another_formatter_cached_is_escaped_too():
    """logging.Formatter keeps the traceback's text on the record for the next handler: unescaped, from a plain
    formatter."""
    hostile = record("failed", exc_info=failure(HOSTILE))
    logging.Formatter(FORMAT).format(hostile)
    assert "\x1b" in hostile.exc_text
    text = OneLineFormatter(FORMAT).format(hostile)
    assert "\x1b" not in text and not any(RECORD_LINE.match(line) for line in text.split("\n")[1:])


def test_a_stack_is_indented_as_a_traceback():
    hostile = record("here")
    hostile.stack_info = 'Stack (most recent call last):\n  File "x.py", line 1, in f\x1b[31m'
    text = OneLineFormatter(FORMAT).format(hostile)
    assert text.split("\n")[1:] == ["  Stack (most recent call last):", '    File "x.py", line 1, in f\\x1b[31m']
