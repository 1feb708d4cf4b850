"""Route paths whose `{name}` parts take any name Kafka allows (aiohttp's default refuses `{` and `}`), as Burrow's
router does: any character but '/', and an encoded one (`%2F`), the match being made before decoding.
"""

from __future__ import annotations

import re

NAME = "[^/]+"
_PART = re.compile(r"\{([_a-zA-Z][_a-zA-Z0-9]*)\}")


def named(path: str) -> str:
    return _PART.sub(rf"{{\1:{NAME}}}", path)
