"""Which consumer groups lagwatch watches: Burrow's group allow/deny regexes (unanchored search).

`linear=True` compiles them with RE2, whose matching time is linear in the group name. Subscriptions' regexes come
from api token holders and are matched on the notifier's event loop against names any Kafka client picks: with
Python's backtracking `re`, `^(a|aa)*$` against forty a's and a `!` runs for minutes and every alert waits. RE2's
syntax is Go's, as Burrow's regexes are; it has no backreferences or lookaround. (The watch filters of the
configuration file keep `re`: they are the operator's own, and `re` is several times cheaper per call.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import re2

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a refused pattern is reported by linear_regex_error, not on stderr


def compile_linear(pattern: str) -> Any:
    return re2.compile(pattern, options=_RE2_OPTIONS)


def linear_regex_error(pattern: str) -> str | None:
    """RE2's reason for refusing `pattern` (lookaround, backreferences, bad syntax), or None."""
    try:
        compile_linear(pattern)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        return reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
    return None


@dataclass(frozen=True)
class GroupFilter:
    """A group is watched when it matches the allowlist (empty = all) and not the denylist (empty = none)."""

    allowlist: str = ""
    denylist: str = ""
    linear: bool = False  # RE2: matching time linear in the name, for regexes from api token holders
    _allow: Any = field(init=False, repr=False, compare=False, default=None)
    _deny: Any = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        compile_ = compile_linear if self.linear else re.compile
        object.__setattr__(self, "_allow", compile_(self.allowlist) if self.allowlist else None)
        object.__setattr__(self, "_deny", compile_(self.denylist) if self.denylist else None)

    def accepts(self, group: str) -> bool:
        if self._allow is not None and self._allow.search(group) is None:
            return False
        return self._deny is None or self._deny.search(group) is None
