"""Groups the evaluator has no status for yet wait behind every group it has one for.

Any client that can commit offsets can write a hundred thousand new group names at once. Evaluated in the order
their notices came, they would hold up a known group's REWIND for as long as the flood takes. So a notice's groups
are triaged: those with a recorded status are evaluated at once, the worst first; the new ones queue here and are
evaluated a chunk at a time whenever nothing else waits (asyncio's lock is fair: a notice that arrives meanwhile
waits for one chunk at most). The queue is drained at the evaluator's own pace, never slower.

A cap on the groups a cluster may have (`evaluator.max-groups`) keeps a flood of junk names from growing every
store without bound: past it, new groups are counted, skipped and their windows deleted (never a known group's)
until the count falls under it again (expiry, deletions).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from lagwatch.shared.protocol.types import Status


def triage(groups: Sequence[str], statuses: Sequence[Status | None]) -> tuple[list[str], list[str]]:
    """(known groups, worst status first; new groups, in the order given)."""
    known = [(status, group) for group, status in zip(groups, statuses, strict=True) if status is not None]
    known.sort(key=lambda item: -item[0])
    new = [group for group, status in zip(groups, statuses, strict=True) if status is None]
    return [group for _, group in known], new


class NewcomerQueue:
    """New groups waiting for their first evaluation, each once, oldest first."""

    def __init__(self) -> None:
        self._waiting: dict[str, None] = {}  # an ordered set

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, groups: Iterable[str]) -> int:
        """Queue these groups; how many were not waiting already."""
        before = len(self._waiting)
        self._waiting.update(dict.fromkeys(groups))
        return len(self._waiting) - before

    def take(self, n: int) -> list[str]:
        """The `n` oldest, out of the queue."""
        taken: list[str] = []
        for group in self._waiting:
            if len(taken) == n:
                break
            taken.append(group)
        for group in taken:
            del self._waiting[group]
        return taken

    def discard(self, groups: Iterable[str]) -> None:
        for group in groups:
            self._waiting.pop(group, None)


def within_cap(new: Sequence[str], known_count: int, cap: int) -> tuple[list[str], list[str]]:
    """(the new groups that fit under `cap` with the `known_count` groups there are, the ones that do not)."""
    room = max(0, cap - known_count) if cap else len(new)
    return list(new[:room]), list(new[room:])
