"""The groups of the changes-topic partitions this instance took over that no evaluation here has looked at yet.

An instance that gets partitions (its start, a restart after a crash, a rebalance) trusts what the evaluator before
it left in Redis: each group's recorded status (compare-and-set: a transition is recorded, with its event in the
outbox, once, whoever evaluates), its ready result and its place in the schedule. So it resumes their schedule at once
and catches up on the groups here, a chunk at a time after whatever the schedule says is due (ownership.py):
recomputing every group before anything else would keep each of them from its STOP for minutes at a hundred
thousand groups. Catching up fills what only an evaluation in this process fills: the log-end index (`WatchIndex`),
the sparklines' memory, and the schedule of a group whose instant Redis lost. What an evaluator that died
mid-evaluation left undone is still found first: a group it evaluated because it was due stays due until its next
instant is written (after its transition is recorded and published), and the change notices of a batch it had not
finished are read again by the next holder of their partition (a batch is acknowledged once handled). An event a
catch-up's evaluation recorded but did not publish before the process died goes out when the next holder catches up
on its group.

A group not caught up has no watch, so a log-end or log-start notice cannot tell whether the poll could change it:
the notice moves the group to the front of the backlog instead (evaluated after what is due, before the others). The
topics each group reads come from its stored result, read a page at a time before the first chunk is evaluated; a
topic named while its readers were not read yet (the notices of the partitions' log since the last owner stopped,
read as soon as they are assigned) is remembered for MOVED_MEMORY_S and brings them forward once they are.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from prometheus_client import Gauge

WAITING = Gauge(
    "lagwatch_evaluator_takeover_backlog",
    "Groups of the changes partitions this instance took over that it has not evaluated yet (their schedule runs "
    "meanwhile; they are evaluated a chunk at a time after whatever is due)",
    ["cluster"],
)
TOPICS_PAGE = 5000  # stored results read per look for the topics of the groups waiting: one Redis round trip
MOVED_MEMORY_S = 60.0  # longer than listing a takeover's groups and reading their topics takes


class TakeoverBacklog:
    """The groups waiting, each once: those a notice moved to the front first, then the others in the order added;
    and which topics the waiting groups read, as far as their stored results were read yet."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self._front: dict[str, None] = {}  # ordered sets
        self._rest: dict[str, None] = {}
        self._unread: dict[str, None] = {}  # waiting groups whose topics were not read yet
        self._topics: dict[str, frozenset[str]] = {}
        self._readers: dict[str, set[str]] = {}  # topic -> the waiting groups reading it
        self._moved: dict[str, float] = {}  # topic -> when a notice last named it (monotonic), the oldest first
        self.unlisted: set[int] = set()  # partitions taken over whose groups are not listed yet
        self._evaluated: set[str] = set()  # groups evaluated while some were (they need no catch-up once listed)
        WAITING.labels(cluster).set(0)

    def __len__(self) -> int:
        return len(self._front) + len(self._rest)

    def __bool__(self) -> bool:
        """Anything left to catch up on: groups waiting, or partitions whose groups are not listed yet."""
        return bool(self._front or self._rest or self.unlisted)

    def __contains__(self, group: object) -> bool:
        return group in self._rest or group in self._front

    def __iter__(self) -> Iterator[str]:
        """The groups waiting, in the order they are to be evaluated."""
        return itertools.chain(self._front, self._rest)

    def take_over(self, new: set[int], owned: set[int]) -> None:
        """Partitions came (`new`) or went: the groups of the new ones are to be listed (`listed`)."""
        self.unlisted = (self.unlisted & owned) | new
        if not self.unlisted:
            self._evaluated.clear()

    def listed(self, partitions: set[int], groups: Iterable[str]) -> None:
        """The groups of these partitions, queued behind those waiting (a group waiting already keeps its place; one
        evaluated since its partition was taken over needs no catch-up)."""
        fresh = dict.fromkeys(group for group in groups if group not in self and group not in self._evaluated)
        self.unlisted -= partitions
        if not self.unlisted:
            self._evaluated.clear()
        self._rest.update(fresh)
        self._unread.update(fresh)
        self._gauge()

    def take(self, n: int) -> list[str]:
        """The next `n` groups to evaluate, out of the backlog."""
        taken = list(itertools.islice(self, n))
        self.done(taken)
        return taken

    def done(self, groups: Sequence[str]) -> None:
        """These groups were evaluated: they wait no more."""
        if self.unlisted:
            self._evaluated.update(groups)
        self._remove(groups)

    def drop(self, gone: Callable[[str], bool]) -> None:
        """Forget the waiting groups `gone` says left this instance (their partitions were handed away)."""
        self._remove([group for group in self if gone(group)])

    def _remove(self, groups: Sequence[str]) -> None:
        if not (self._front or self._rest):
            return
        for group in groups:
            self._front.pop(group, None)
            self._rest.pop(group, None)
            self._unread.pop(group, None)
            for topic in self._topics.pop(group, ()):
                readers = self._readers[topic]
                readers.discard(group)
                if not readers:
                    del self._readers[topic]
        if not (self._front or self._rest):
            self._release()
        self._gauge()

    def _release(self) -> None:
        """Caught up: a dict keeps the table of its largest size (a takeover's every group) after its keys are taken
        out, and clearing it gives the table back."""
        for waiting in (self._front, self._rest, self._unread, self._topics, self._readers):
            waiting.clear()

    def unread(self, n: int) -> list[str]:
        """Up to `n` waiting groups whose topics were not read yet."""
        return list(itertools.islice(self._unread, n))

    def read(self, groups: Sequence[str], topics: Mapping[str, Iterable[str]]) -> None:
        """The topics these groups read, from their stored results (a group without one is read all the same:
        only a notice naming it, or its turn, brings it forward). Those reading a topic a notice named lately go to
        the front."""
        self._forget_moves(time.monotonic())
        moved = []
        for group in groups:
            if group not in self._unread:
                continue  # evaluated meanwhile
            del self._unread[group]
            self._topics[group] = read = frozenset(topics.get(group, ()))
            for topic in read:
                self._readers.setdefault(topic, set()).add(group)
            if not read.isdisjoint(self._moved):
                moved.append(group)
        self._to_front(moved)

    def promote(self, topics: Iterable[str]) -> int:
        """A notice named these topics: the waiting groups reading them go to the front; how many moved."""
        now, named = time.monotonic(), list(topics)
        for topic in named:
            self._moved.pop(topic, None)
            self._moved[topic] = now
        self._forget_moves(now)
        return self._to_front({group for topic in named for group in self._readers.get(topic, ())})

    def _to_front(self, groups: Iterable[str]) -> int:
        moved = sorted(group for group in groups if group in self._rest)
        for group in moved:
            del self._rest[group]
        self._front.update(dict.fromkeys(moved))
        return len(moved)

    def _forget_moves(self, now: float) -> None:
        while self._moved and next(iter(self._moved.values())) < now - MOVED_MEMORY_S:
            del self._moved[next(iter(self._moved))]

    def _gauge(self) -> None:
        WAITING.labels(self.cluster).set(len(self))
