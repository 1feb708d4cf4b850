"""JSON written by msgspec where its bytes are the standard library's (`json.dumps`, compact, ASCII): the events and
the stored results keep the bytes lagwatch always wrote, and a cold start writes one of each per group, where
msgspec's writer is several times faster. The standard library stays the reference; a value msgspec would spell
otherwise is written by it."""

from __future__ import annotations

import re

# a number msgspec writes in exponent form ("1e16", "1.5e-7"; compact JSON: it ends at ",", "}" or "]"), found from
# its "e" (a search for a letter first is several times faster than one for a digit)
_EXPONENT = re.compile(rb"e(?<=[0-9]e)-?[0-9]+[,}\]]")


def spelled_alike(raw: bytes) -> bool:
    """Whether msgspec's JSON `raw` is the standard library's for the same value (`json.dumps`, compact, ASCII): not
    where it has DEL or non-ASCII text (msgspec writes them raw), a number in exponent form or a small one in
    decimals ("0.00001", the standard library's 1e-05). Text that only looks like one of those ("x:3e5,") answers
    no: the caller's reference writes it, slower, never different. Floats are finite (msgspec writes NaN and the
    infinities as null, the standard library as NaN): every one lagwatch writes is a quotient of integers."""
    return raw.isascii() and b"\x7f" not in raw and b"0.0000" not in raw and _EXPONENT.search(raw) is None
