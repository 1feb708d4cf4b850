"""Names made safe to show where a line break means something (shared/runtime/printable.py)."""

import pytest

from lagwatch.shared.runtime.printable import printable


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("billing\n2025-01-01 ERROR forged", "billing\\n2025-01-01 ERROR forged"),  # a line of its own
        ("a\r\nBcc: x@evil.example", "a\\r\\nBcc: x@evil.example"),  # a mail header of its own
        ("\x1b[2J\x1b[31mred", "\\x1b[2J\\x1b[31mred"),  # ANSI: clear the screen, colour
        ("\x9b31m", "\\x9b31m"),  # C1's one-byte CSI
        ("\x00\x07\x08\t\x0b\x0c\x7f", "\\x00\\x07\\x08\\t\\x0b\\x0c\\x7f"),
        ("next\x85line\u2028and\u2029so", "next\\x85line\\u2028and\\u2029so"),  # what some viewers break lines on
    ],
)
def test_every_control_character_is_written_as_its_escape(name, shown):
    assert printable(name) == shown
    assert printable(name).isprintable()


def test_everything_else_is_kept_as_it_is():
    for name in ("billing", "zahlungsdienst-ä", "決済", '<!channel> [x](y) **z** & "q" \\n'):
        assert printable(name) == name
