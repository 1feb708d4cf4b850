"""Which consumer groups lagwatch watches: Burrow's group allow/deny regexes (unanchored search)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GroupFilter:
    """A group is watched when it matches the allowlist (empty = all) and not the denylist (empty = none)."""

    allowlist: str = ""
    denylist: str = ""
    _allow: re.Pattern[str] | None = field(init=False, repr=False, compare=False, default=None)
    _deny: re.Pattern[str] | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_allow", re.compile(self.allowlist) if self.allowlist else None)
        object.__setattr__(self, "_deny", re.compile(self.denylist) if self.denylist else None)

    def accepts(self, group: str) -> bool:
        if self._allow is not None and self._allow.search(group) is None:
            return False
        return self._deny is None or self._deny.search(group) is None
