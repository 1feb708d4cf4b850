"""Route paths whose `{name}` parts take any name Kafka allows, as Burrow's router does.

aiohttp's default `{name}` pattern refuses `{` and `}`, which a consumer group's name may hold (Kafka puts no limit
on its characters): such a group would be "no such route" on every route naming it. Burrow's router takes any
character but '/' in a name; here an encoded one (`%2F`) is taken too, the match being made before it is decoded.
"""

from __future__ import annotations

import re

NAME = "[^/]+"
_PART = re.compile(r"\{([_a-zA-Z][_a-zA-Z0-9]*)\}")


def named(path: str) -> str:
    """`path` with each `{part}` matching any name up to the next '/'."""
    return _PART.sub(rf"{{\1:{NAME}}}", path)
