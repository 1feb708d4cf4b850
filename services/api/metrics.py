"""`GET /metrics`: Prometheus text with Burrow's metric names, from the evaluator's ready results, plus lagwatch's own.

Burrow's families have its names, labels and values (`prometheus.go`); as there, a partition's current offset and
status are only exported once its window is complete (every ring slot filled). No window is read and no rule run per
scrape: the evaluator's stored results are read, with lags from the topics' log ends now (what the rules compute from
the same data); groups not evaluated yet are not in the scrape. `api.metrics-*` can leave out partition-level series,
a group's series, a topic's partition-level series (a group's totals still count every partition) or whole gauge
families.

lagwatch's counters are the running totals the ingest and the evaluator keep in Redis, so one scrape shows every
worker's work. The scrape runs in a worker process (`scrape_process.py`), which imports this module and what it
needs only (not aiohttp: the route, concurrent scrapes sharing one render and the streaming of the body from the
file the worker wrote are `metrics_route.py`'s).
"""

from __future__ import annotations

import os
import tempfile
from array import array
from collections import Counter as Tally
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, islice
from typing import BinaryIO

import msgspec
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from redis.asyncio import Redis

from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.group_filter import GroupFilter
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.config import Config
from lagwatch.shared.runtime.presence import running_counts
from lagwatch.shared.runtime.prometheus_text import render
from lagwatch.shared.runtime.redis_client import reply
from lagwatch.shared.runtime.redis_memory import RedisMemory, read_memory
from lagwatch.shared.statuses.results_store import (
    CAUGHT_UP_LAG,
    HOUR_MS,
    UNKNOWN_CATCHUP,
    UNKNOWN_LAG,
    catchup_seconds,
    decode_stored,
)
from lagwatch.shared.windows.ingest_totals import KNOWN_TYPES, read_totals
from lagwatch.shared.windows.store import WindowStore
from lagwatch.shared.windows.window import AddOutcome

# The ingest counters' label values, a fixed set (an older ingest minted one per corrupt record's type and
# the stats hash keeps them): what `services/ingest` writes; any other value is counted under "other".
_RECORD_TYPES = frozenset(str(t) for t in KNOWN_TYPES) | {"other"}
DECODE_ERROR_TYPES = _RECORD_TYPES | {"no-key", "out-of-range", "assignment"}
SKIP_REASONS = _RECORD_TYPES | {"filtered", "offset_commit_tombstone", "group_deleted", "group_upgraded"}
COMMIT_OUTCOMES = frozenset(o.name.lower() for o in AddOutcome) | {"other"}
LABEL_VALUES = {"decode_error": DECODE_ERROR_TYPES, "outcome": COMMIT_OUTCOMES, "skipped": SKIP_REASONS}
COUNTERS = {  # the totals' field kind (before any ":") -> (family, help, labels), in the order written
    "records": ("lagwatch_ingest_records", "Records read from the offsets topic", ["cluster"]),
    "batches": ("lagwatch_ingest_batches", "Batches stored by the ingest", ["cluster"]),
    "decode_error": ("lagwatch_ingest_decode_errors", "Records that could not be decoded", ["cluster", "type"]),
    "skipped": ("lagwatch_ingest_skipped_records", "Records skipped on purpose", ["cluster", "reason"]),
    "outcome": ("lagwatch_ingest_commits", "Offset commits by what the window store did", ["cluster", "outcome"]),
    "redis_retries": ("lagwatch_ingest_retries", "Ingest batches retried after a failure", ["cluster"]),
    "events_published": ("lagwatch_events_published", "Status-change events acknowledged by Kafka", ["cluster"]),
    "transitions": ("lagwatch_status_transitions", "Status changes recorded", ["cluster"]),
    "evaluations": ("lagwatch_evaluations", "Group evaluations", ["cluster", "trigger"]),
    "evaluation_seconds": ("lagwatch_evaluation_seconds", "Time spent evaluating groups", ["cluster"]),
    "sweeps": ("lagwatch_evaluator_sweeps", "Evaluator sweeps completed", ["cluster"]),
}
EVALUATOR_KINDS = frozenset({"events_published", "transitions", "evaluations", "evaluation_seconds", "sweeps"})
GAUGES = {  # name -> help, in the order they are written
    "burrow_kafka_consumer_status": "Consumer group status (Burrow's numbering)",
    "burrow_kafka_consumer_lag_total": "Sum of the group's partition lags",
    "lagwatch_consumer_group_max_lag": "The group's largest partition lag",
    "burrow_kafka_consumer_partition_lag": "Partition's current lag",
    "burrow_kafka_consumer_current_offset": "Partition's newest committed offset (complete windows only)",
    "burrow_kafka_topic_partition_status": "Partition status (Burrow's numbering; complete windows only)",
    "burrow_kafka_topic_partition_offset": "Latest log-end offset",
    "lagwatch_group_rebalances_last_hour": "Generations started in the last hour",
    "lagwatch_consumer_lag_seconds": "How long ago the log end passed the newest committed offset "
    "(a lower bound when history is short)",
    "lagwatch_consumer_group_max_lag_seconds": "The group's largest lag in seconds",
    "lagwatch_consumer_group_catchup_seconds": "Estimated seconds until the group's slowest partition is caught up "
    "(+Inf: its consumer is not faster than its producer)",
    "lagwatch_consumer_group_lag_growth_per_second": "Messages per second the group's lag grows by (produce rate "
    "minus consume rate; negative while it shrinks)",
    "lagwatch_consumer_group_retention_risk_seconds": "Estimated seconds until the group's oldest unconsumed "
    "message is deleted by retention (0: messages were already skipped)",
    "lagwatch_consumer_group_skipped_messages": "Messages retention deleted before the group consumed them "
    "(committed offset below the log start)",
}


def label_value(value: str) -> str:
    """Escaped as the text format wants (backslash, double quote, newline)."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


CLOCK_READ = 4 << 20  # bytes of a clock spool's texts read at a time


@dataclass(slots=True)
class ClockSpool:
    """One clock family's lines of the groups that move with the clock, in their order: each line's text up to its
    value in a file (a line each: at a million partitions they are a body's size), and each line's clock input in
    memory, so a scrape renders only the values."""

    family: str
    path: str
    inputs: list[object] | array[int]
    size: int = 0

    def write(self, out: BinaryIO, now: int) -> None:
        """The lines at `now` into `out`: the texts cut at their newlines and interleaved with the values in C
        (split, map, zip, join), not a line at a time in Python."""
        values, inputs, rest = _ClockValues(CLOCK_VALUES[self.family], now), iter(self.inputs), b""
        with open(self.path, "rb") as source:
            while chunk := source.read(CLOCK_READ):
                chunk = rest + chunk
                end = chunk.rfind(b"\n") + 1
                prefixes, rest = chunk[:end].split(b"\n"), chunk[end:]
                prefixes.pop()  # what follows the last newline: nothing
                texts = map(values.__getitem__, islice(inputs, len(prefixes)))
                out.write(b"".join(chain.from_iterable(zip(prefixes, texts, strict=True))))
        if rest:
            raise OSError(f"{self.path} ends in the middle of a line")


class _ClockValues(dict[object, bytes]):
    """Clock input -> its value's text at one time, and a newline: each computed once (many lines share one)."""

    def __init__(self, value: Callable[[object, int], str], now: int) -> None:
        super().__init__()
        self.value, self.now = value, now

    def __missing__(self, given: object) -> bytes:
        text = self[given] = f"{self.value(given, self.now)}\n".encode()
        return text


@dataclass(slots=True)
class ClockLines:
    """A spool's lines at one scrape's time (a block of `Series`)."""

    spool: ClockSpool
    now: int


# lines as text, or encoded, or (a spool file, its size), or a clock spool's lines at a time
Block = str | bytes | tuple[str, int] | ClockLines


class Series:
    """The gauge families of one scrape as text lines (prometheus_client's objects per sample are far too slow)."""

    def __init__(self) -> None:
        self.lines: dict[str, list[Block]] = {name: [] for name in GAUGES}

    def write(self, out: BinaryIO, families: GroupFilter) -> None:
        """Each family's lines into `out` (a file: spooled blocks are copied by the kernel, never read in here),
        the families `families` accepts, those with any line."""
        for name, chunks in self.lines.items():
            if not families.accepts(name) or not any(_size(chunk) for chunk in chunks):
                continue
            out.write(f"# HELP {name} {GAUGES[name]}\n# TYPE {name} gauge\n".encode())
            for chunk in chunks:
                if isinstance(chunk, tuple):
                    _copy_file(chunk[0], chunk[1], out)
                elif isinstance(chunk, ClockLines):
                    chunk.spool.write(out, chunk.now)
                else:
                    out.write(chunk if isinstance(chunk, bytes) else chunk.encode())


def _size(block: Block) -> int:
    if isinstance(block, ClockLines):
        return block.spool.size
    return block[1] if isinstance(block, tuple) else len(block)


def _copy_file(path: str, size: int, out: BinaryIO) -> None:
    out.flush()
    with open(path, "rb") as source:
        sent = 0
        while sent < size:
            n = os.sendfile(out.fileno(), source.fileno(), sent, size - sent)
            if n == 0:
                raise OSError(f"{path} is shorter than the {size} bytes spooled")
            sent += n


PARTITION_FAMILIES = (  # a group's partitions' families, in the order _scan_partitions takes them
    "burrow_kafka_consumer_partition_lag",
    "burrow_kafka_consumer_current_offset",
    "burrow_kafka_topic_partition_status",
    "lagwatch_consumer_lag_seconds",
)


class MetricsFilter:
    def __init__(self, config: Config) -> None:
        api = config.api
        self.partitions = api.metrics_partition_series
        self.groups = GroupFilter(api.metrics_group_allowlist, api.metrics_group_denylist)
        self.topics = GroupFilter(api.metrics_topic_allowlist, api.metrics_topic_denylist)
        self.all_groups = not (api.metrics_group_allowlist or api.metrics_group_denylist)
        self.all_topics = not (api.metrics_topic_allowlist or api.metrics_topic_denylist)
        self.families = GroupFilter("", api.metrics_family_denylist)
        self.kept = {name: self.families.accepts(name) for name in GAUGES}  # not rendered at all when left out
        self.group_families_kept = tuple(self.kept[name] for name in GROUP_FAMILIES)
        self.partition_families_kept = tuple(self.kept[name] for name in PARTITION_FAMILIES)
        self.clock_families_kept = tuple(self.kept[name] for name in CLOCK_FAMILIES)
        self.ring_size = config.storage.intervals  # a partition is complete with this many commits


# the families a group's lines go to, in the order `group_lines` returns them (a topic's offsets are not a group's)
GROUP_FAMILIES = tuple(name for name in GAUGES if name != "burrow_kafka_topic_partition_offset")


SPOOL_GROUPS = 1_000  # groups rendered before their lines are appended to the spool files (their lines held till then)
RESULTS_PER_READ = 5_000  # stored results read at a time


@dataclass(slots=True)
class _RenderedCluster:
    results: tuple[int, int]  # what it was rendered from: `fingerprint` of the results, not them (they grow with it)
    log_ends: tuple[int, int]  # `ends_fingerprint` of the log ends it was rendered with (not them: one per partition)
    spooled: list[tuple[str, int]]  # the steady groups' lines: a file per family of GROUP_FAMILIES, and its size
    moving: list[tuple[str, int]]  # the other groups' lines that do not move with the clock, the same way
    clocked: list[ClockSpool]  # their lines that do, a spool per family of CLOCK_FAMILIES


class _SpoolWriter:
    """Writes a cluster's render to its spool files as groups are rendered, SPOOL_GROUPS at a time."""

    def __init__(self, paths: list[str], now: int) -> None:
        self.now, families = now, len(GROUP_FAMILIES)
        self.steady, self.moving = paths[:families], paths[families : 2 * families]
        self.clocked = [
            ClockSpool(name, path, [] if name == "lagwatch_group_rebalances_last_hour" else array("q"))
            for name, path in zip(CLOCK_FAMILIES, paths[2 * families :], strict=True)
        ]
        self.files = [open(path, "wb") for path in paths]  # noqa: SIM115 - closed by close()
        self.steady_rows: list[tuple[str, ...]] = []
        self.moving_rows: list[tuple[str, ...]] = []
        self.clock_prefixes: list[list[str]] = [[] for _ in CLOCK_FAMILIES]

    def add(self, lines: tuple[str, ...], clocked: Clocked) -> None:
        if not any(_moves(clocked)):
            self.steady_rows.append(_with_clock_lines(lines, clocked, self.now))
        else:
            self.moving_rows.append(lines)
            for spool, prefixes, pairs in zip(self.clocked, self.clock_prefixes, clocked, strict=True):
                for prefix, given in pairs:
                    prefixes.append(prefix)
                    spool.inputs.append(given)  # type: ignore[arg-type]  # an int where the array holds them
        if len(self.steady_rows) + len(self.moving_rows) >= SPOOL_GROUPS:
            self.flush()

    def flush(self) -> None:
        families = len(GROUP_FAMILIES)
        _spool(self.files[:families], self.steady_rows)
        _spool(self.files[families : 2 * families], self.moving_rows)
        for f, prefixes in zip(self.files[2 * families :], self.clock_prefixes, strict=True):
            if prefixes:
                f.write(("\n".join(prefixes) + "\n").encode())
                prefixes.clear()

    def close(self) -> tuple[list[tuple[str, int]], list[tuple[str, int]], list[ClockSpool]]:
        """The files' paths and sizes: the steady groups', the moving groups' fixed lines', their clock lines."""
        self.flush()
        sizes = [f.tell() for f in self.files]
        families = len(GROUP_FAMILIES)
        for spool, size in zip(self.clocked, sizes[2 * families :], strict=True):
            spool.size = size
        steady = list(zip(self.steady, sizes[:families], strict=True))
        return steady, list(zip(self.moving, sizes[families : 2 * families], strict=True)), self.clocked

    def close_files(self) -> None:
        for f in self.files:
            f.close()


class RenderedGroups:
    """The scrape process's memory of what it rendered, so a quiet cluster's scrape renders next to nothing: the
    groups' lines are kept while the cluster's results and log ends stay the same, spooled to disk (a file per
    family), not in memory (at a million partitions they are hundreds of MB); a scrape copies them into its body with
    sendfile. The lines whose values move with the clock (lag in seconds, estimates counting down) are spooled up to
    their value, their clock inputs kept: a scrape renders only those values."""

    def __init__(self, spool_dir: str) -> None:
        self.spool_dir = spool_dir
        self._clusters: dict[str, _RenderedCluster] = {}
        self._names: dict[str, int] = {}  # cluster -> the number in its spool files' names
        self._decode = decode_stored

    async def add(
        self,
        series: Series,
        cluster: str,
        results: StoredResults,
        log_ends: dict[tuple[str, int], int],
        now: int,
        keep: MetricsFilter,
    ) -> None:
        last = self._clusters.get(cluster)
        ends = ends_fingerprint(log_ends)
        if last is None or last.log_ends != ends or last.results != await results.fingerprint():
            self._clusters.pop(cluster, None)  # a render failing half-way leaves nothing to reuse
            last = self._clusters[cluster] = await self._render_all(cluster, results, log_ends, now, keep)
        for name, steady, fixed in zip(GROUP_FAMILIES, last.spooled, last.moving, strict=True):
            series.lines[name] += (steady, fixed)
        for spool in last.clocked:
            series.lines[spool.family].append(ClockLines(spool, now))

    async def _render_all(
        self, cluster: str, results: StoredResults, log_ends: dict[tuple[str, int], int], now: int, keep
    ) -> _RenderedCluster:
        """The cluster's groups rendered to its spool files, and the fingerprint of the results rendered (read
        again: they may have changed since they were fingerprinted)."""
        cluster_label = label_value(cluster)
        writer, count, hashes = _SpoolWriter(self._spool_paths(cluster), now), 0, 0
        try:
            async for stored in results.slices():
                count, hashes = count + len(stored), hashes + _hashes(stored)
                for raw_group, raw in stored.items():
                    group = raw_group.decode()
                    if not keep.all_groups and not keep.groups.accepts(group):
                        continue
                    rendered = self._render(cluster_label, group, raw, log_ends, keep)
                    if rendered is not None:
                        writer.add(*rendered)
            return _RenderedCluster((count, hashes), ends_fingerprint(log_ends), *writer.close())
        finally:
            writer.close_files()

    def _spool_paths(self, cluster: str) -> list[str]:
        number = self._names.setdefault(cluster, len(self._names))
        files = 2 * len(GROUP_FAMILIES) + len(CLOCK_FAMILIES)
        return [os.path.join(self.spool_dir, f"{number}-{i}") for i in range(files)]

    def _render(
        self, cluster_label: str, group: str, raw: bytes, log_ends, keep
    ) -> tuple[tuple[str, ...], Clocked] | None:
        try:
            result = self._decode(raw)
        except msgspec.DecodeError:
            return None  # unreadable: the next evaluation rewrites it
        if not isinstance(result, list) or len(result) < 4:
            return None  # not a result's layout: the same
        return render_group(cluster_label, group, result, log_ends, keep)


def fingerprint(results: Mapping[bytes, bytes]) -> tuple[int, int]:
    """The same for the same results (in one process, whatever their order), different when any group or result
    differs: their count and the sum of a 64-bit hash (SipHash, keyed at random per process) of each pair, written
    out whole (its group's length first, so no two pairs write the same bytes). Not the pairs' tuples' hashes: their
    sum is the same when two groups swap results. A sum, so it adds up over the slices the results are read in."""
    return len(results), _hashes(results)


def ends_fingerprint(log_ends: Mapping[tuple[str, int], int]) -> tuple[int, int]:
    """As `fingerprint`, of log ends: their count and the sum of each (partition, log end)'s text's hash. Not the
    tuples' hashes: a tuple's hash mixes its parts' hashes so regularly that two partitions swapping their log ends
    can leave the sum unchanged; a text's hash is keyed (SipHash), so sums of them do not cancel out."""
    return len(log_ends), sum(hash(f"{topic}\0{partition}\0{end}") for (topic, partition), end in log_ends.items())


def _hashes(results: Mapping[bytes, bytes]) -> int:
    return sum(hash(b"%d:%b%b" % (len(group), group, raw)) for group, raw in results.items())


class StoredResults:
    """A cluster's stored results, read a slice at a time (its groups' names once, then RESULTS_PER_READ results a
    read) as often as asked: the whole hash in one reply was the scrape process's biggest allocation, and what it
    freed stayed the process's."""

    def __init__(self, redis: Redis, cluster: str) -> None:
        self.redis, self.key = redis, keys.group_results(cluster)
        self._names: list[bytes] | None = None

    async def slices(self) -> AsyncIterator[dict[bytes, bytes]]:
        """The results, RESULTS_PER_READ groups at a time (a group deleted meanwhile left out)."""
        every = await self._group_names()
        for i in range(0, len(every), RESULTS_PER_READ):
            names = every[i : i + RESULTS_PER_READ]
            raws = await reply(self.redis.hmget(self.key, names))
            yield {name: raw for name, raw in zip(names, raws, strict=True) if raw is not None}

    async def _group_names(self) -> list[bytes]:
        """Read once: the slices of every pass are of the same groups."""
        if self._names is not None:
            return self._names
        names: list[bytes] = await reply(self.redis.hkeys(self.key))
        self._names = names
        return names

    async def fingerprint(self) -> tuple[int, int]:
        """`fingerprint` of the results as they are now, read a slice at a time."""
        count = hashes = 0
        async for stored in self.slices():
            count, hashes = count + len(stored), hashes + _hashes(stored)
        return count, hashes


def _spool(files: Sequence[BinaryIO], rows: list[tuple[str, ...]]) -> None:
    """Appends the rows' lines to each family's file, and empties `rows`."""
    for f, block in zip(files, _columns(rows), strict=True):
        f.write(block)
    rows.clear()


def _columns(rows: list[tuple[str, ...]]) -> tuple[bytes, ...]:
    """Groups' lines (a row per group, a column per family of GROUP_FAMILIES) as one block per family."""
    if not rows:
        return (b"",) * len(GROUP_FAMILIES)
    return tuple("".join(column).encode() for column in zip(*rows, strict=True))


def group_lines(
    cluster_label: str,
    group: str,
    group_status: int,
    started: list[int],
    parts: list[list],
    log_ends: Mapping[tuple[str, int], int],
    now: int,
    keep: MetricsFilter,
    velocity: list | None = None,
) -> tuple[tuple[str, ...], bool]:
    """A group's text for each of GROUP_FAMILIES at `now`, and whether it stays right while the result and the log
    ends do (False: it moves with the clock)."""
    result = [group_status, 0, started, parts, *([velocity] if velocity else [])]
    lines, clocked = render_group(cluster_label, group, result, log_ends, keep)
    return _with_clock_lines(lines, clocked, now), not any(_moves(clocked))


def _with_clock_lines(lines: tuple[str, ...], clocked: Clocked, now: int) -> tuple[str, ...]:
    """`lines` (GROUP_FAMILIES' order, the clock families' empty) with the clock families' text at `now` put in."""
    texts = list(lines)
    for position, name, pairs in zip(CLOCK_POSITIONS, CLOCK_FAMILIES, clocked, strict=True):
        texts[position] = clocked_text(name, pairs, now)
    return tuple(texts)


Clocked = tuple[list[tuple[str, object]], ...]  # per family of CLOCK_FAMILIES: (line up to its value, clock input)


def render_group(
    cluster_label: str, group: str, result: list, log_ends: Mapping[tuple[str, int], int], keep: MetricsFilter
) -> tuple[tuple[str, ...], Clocked]:
    """A group's text for each of GROUP_FAMILIES that does not move with the clock, from its decoded result
    (results_store.py's layout is read here: status, last commit, generations started, partitions, then optionally
    [catch-up anchor, lag growth, retention anchor, skipped]), the clock families' left empty; and their lines as
    (text up to the value, what `CLOCK_VALUES` turns into the value at a time)."""
    group_status, _, started, parts, *rest = result
    velocity = rest[0] if rest else None
    labels = f'cluster="{cluster_label}",consumer_group="{label_value(group)}"'
    scan = _scan_partitions(labels, parts, log_ends, keep)
    catchup, growth, retention, skipped = [*velocity, -1, 0][:4] if velocity else (UNKNOWN_CATCHUP, None, -1, 0)
    values = (  # in the order of GROUP_FAMILIES: a line's value (None: no line), or the lines of the partitions
        group_status,
        scan.total,
        scan.biggest,
        scan.lag,
        scan.offset,
        scan.status,
        None,  # the clock families': in `clocked`
        None,
        None,
        None,
        growth,
        None,
        skipped if velocity else None,
    )
    lines = tuple(
        "" if v is None or not kept else "".join(v) if isinstance(v, list) else f"{name}{{{labels}}} {v}\n"
        for name, v, kept in zip(GROUP_FAMILIES, values, keep.group_families_kept, strict=True)
    )
    inputs = (  # in the order of CLOCK_FAMILIES: a group line's clock input (None: no line), or the partitions'
        tuple(started),
        scan.seconds,
        scan.oldest_anchor,
        None if catchup == UNKNOWN_CATCHUP else catchup,
        retention if retention >= 0 else None,
    )
    clocked = tuple(
        [] if v is None or not kept else v if isinstance(v, list) else [(f"{name}{{{labels}}} ", v)]
        for name, v, kept in zip(CLOCK_FAMILIES, inputs, keep.clock_families_kept, strict=True)
    )
    return lines, clocked


def _moves(clocked: Clocked) -> Iterable[bool]:
    """Whether each clock family's lines of a group change with the clock (what `CLOCK_VALUES` makes of them)."""
    started, seconds, oldest, catchup, retention = clocked
    yield any(at for _, at in started)  # a start leaves the last hour
    yield any(anchor != CAUGHT_UP_LAG for _, anchor in seconds)
    yield any(anchor != CAUGHT_UP_LAG for _, anchor in oldest)
    yield any(isinstance(anchor, int) and anchor >= 0 for _, anchor in catchup)  # counts down
    yield bool(retention)  # counts down


def _seconds_since(anchor: object, now: int) -> str:
    assert isinstance(anchor, int)
    return str(0.0 if anchor == CAUGHT_UP_LAG else max(0.0, (now - anchor) / 1000))


def _catchup_text(anchor: object, now: int) -> str:
    assert isinstance(anchor, int)
    seconds = catchup_seconds(anchor, now)
    return "+Inf" if seconds == float("inf") else repr(seconds)


def _seconds_until(at: object, now: int) -> str:
    assert isinstance(at, int)
    return str(max(0.0, (at - now) / 1000))


def _starts_last_hour(started: object, now: int) -> str:
    assert isinstance(started, tuple)
    return str(sum(1 for at in started if at >= now - HOUR_MS))


CLOCK_VALUES = {  # the families whose values move with the clock -> their value at a time, from their clock input
    "lagwatch_group_rebalances_last_hour": _starts_last_hour,
    "lagwatch_consumer_lag_seconds": _seconds_since,  # a partition's: when its log end passed its commit
    "lagwatch_consumer_group_max_lag_seconds": _seconds_since,  # the group's oldest such anchor
    "lagwatch_consumer_group_catchup_seconds": _catchup_text,
    "lagwatch_consumer_group_retention_risk_seconds": _seconds_until,
}
CLOCK_FAMILIES = tuple(CLOCK_VALUES)
CLOCK_POSITIONS = tuple(GROUP_FAMILIES.index(name) for name in CLOCK_FAMILIES)


def clocked_text(family: str, pairs: Iterable[tuple[str, object]], now: int) -> str:
    value = CLOCK_VALUES[family]
    return "".join(f"{prefix}{value(given, now)}\n" for prefix, given in pairs)


@dataclass(slots=True)
class _PartitionScan:
    """What one pass over a group's partitions gives: the group's sums and each partition's lines."""

    total: int = 0
    biggest: int = 0
    oldest_anchor: int | None = None  # the lag anchor of the most lag in seconds (CAUGHT_UP_LAG: none lags)
    lag: list[str] = field(default_factory=list)
    offset: list[str] = field(default_factory=list)
    status: list[str] = field(default_factory=list)
    seconds: list[tuple[str, object]] = field(default_factory=list)  # (line up to its value, lag anchor)


def _scan_partitions(
    labels: str, parts: list[list], log_ends: Mapping[tuple[str, int], int], keep: MetricsFilter
) -> _PartitionScan:
    scan, lines = _PartitionScan(), keep.partitions
    want_lag, want_offset, want_status, want_seconds = keep.partition_families_kept
    total = biggest = 0
    oldest: int | None = None
    for topic, partition, part_status, newest, filled, anchor, *rest in parts:
        end = log_ends.get((topic, partition))
        lag = end - newest if end is not None and newest >= 0 and end > newest else 0
        if (
            rest and len(rest) > 1 and end == rest[1]
        ):  # only transaction markers up to this log end (PartitionResult.lag)
            lag = 0
        total += lag
        biggest = lag if lag > biggest else biggest
        if anchor != UNKNOWN_LAG and (oldest is None or oldest == CAUGHT_UP_LAG or 0 <= anchor < oldest):
            oldest = anchor
        if not lines or not (keep.all_topics or keep.topics.accepts(topic)):
            continue
        part = f'{labels},topic="{label_value(topic)}",partition="{partition}"}} '
        if want_lag:
            scan.lag.append(f"burrow_kafka_consumer_partition_lag{{{part}{lag}\n")
        if filled >= keep.ring_size and newest >= 0:  # Burrow: `if partition.Complete == 1.0`
            if want_offset:
                scan.offset.append(f"burrow_kafka_consumer_current_offset{{{part}{newest}\n")
            if want_status:
                scan.status.append(f"burrow_kafka_topic_partition_status{{{part}{part_status}\n")
        if anchor != UNKNOWN_LAG and want_seconds:
            scan.seconds.append((f"lagwatch_consumer_lag_seconds{{{part}", anchor))
    scan.total, scan.biggest, scan.oldest_anchor = total, biggest, oldest
    return scan


def add_topic_offsets(
    series: Series, cluster: str, log_ends: Mapping[tuple[str, int], int], keep: MetricsFilter
) -> None:
    if not keep.partitions or not keep.kept["burrow_kafka_topic_partition_offset"]:
        return
    lines = series.lines["burrow_kafka_topic_partition_offset"]
    cluster_label = label_value(cluster)
    for (topic, partition), offset in sorted(log_ends.items()):
        if keep.all_topics or keep.topics.accepts(topic):
            labels = f'cluster="{cluster_label}",topic="{label_value(topic)}",partition="{partition}"'
            lines.append(f"burrow_kafka_topic_partition_offset{{{labels}}} {offset}\n")


class Counters:
    """lagwatch's running totals, as counter families (few samples: prometheus_client renders them)."""

    def __init__(self) -> None:
        self.families = {
            k: CounterMetricFamily(name, doc, labels=labels) for k, (name, doc, labels) in COUNTERS.items()
        }

    def add_ingest_totals(self, cluster: str, totals: Mapping[str, int]) -> None:
        """Field names as `services/ingest/metrics.py` writes them, labelled as its own counters are (label values
        outside the fixed sets are summed under "other")."""
        labelled: Tally[tuple[str, str]] = Tally()  # (kind, label value) -> count
        for name, n in totals.items():
            kind, _, detail = name.partition(":")
            if kind in ("records", "batches", "redis_retries"):
                self.families[kind].add_metric([cluster], n)
                continue
            if kind not in LABEL_VALUES:  # a skip reason, alone or after "skipped:"
                kind, detail = "skipped", detail or kind
            labelled[kind, detail if detail in LABEL_VALUES[kind] else "other"] += n
        for (kind, label), n in labelled.items():
            self.families[kind].add_metric([cluster, label], n)

    def add_evaluator_totals(self, cluster: str, totals: Mapping[str, float]) -> None:
        for name, n in totals.items():
            kind, _, trigger = name.partition(":")
            if kind in EVALUATOR_KINDS:
                self.families[kind].add_metric([cluster, trigger] if kind == "evaluations" else [cluster], n)


def _gauge(name: str, doc: str, labels: list[str], samples: Iterable[tuple[list[str], float]]) -> Metric:
    family = GaugeMetricFamily(name, doc, labels=labels)
    for values, value in samples:
        family.add_metric(values, value)
    return family


def cluster_family(configured: Iterable[str], found: Iterable[str]) -> Metric:
    configured = set(configured)
    samples = [([cluster], int(cluster in configured)) for cluster in sorted(configured | set(found))]
    doc = "1: the api's configuration names the cluster; 0: only Redis keeps data of it (lagwatch forget-cluster)"
    return _gauge("lagwatch_cluster_configured", doc, ["cluster"], samples)


def instances_family(running: Mapping[tuple[str, str], int]) -> Metric:
    """Read here, where it stays when every instance is gone (their own series go with them, and so does any alert
    on those: `up` has no target left once their pods are gone)."""
    samples = [([cluster, service], n) for (cluster, service), n in sorted(running.items())]
    doc = "Instances of the service (ingest worker, evaluator, notifier) running for the cluster"
    return _gauge("lagwatch_service_instances", doc, ["cluster", "service"], samples)


def redis_memory_families(servers: Iterable[RedisMemory]) -> list[Metric]:
    """Whether each Redis server may evict lagwatch's keys, and how many keys it evicted since it started
    (shared/runtime/redis_memory.py); no series where INFO is refused."""
    may_evict = GaugeMetricFamily(
        "lagwatch_redis_may_evict",
        "1 when Redis has a maxmemory and a maxmemory-policy other than noeviction: it deletes keys when full",
        labels=["server", "policy"],
    )
    evicted = CounterMetricFamily(
        "lagwatch_redis_evicted_keys", "Keys Redis evicted since it started (INFO evicted_keys)", labels=["server"]
    )
    used = GaugeMetricFamily("lagwatch_redis_memory_used_bytes", "Redis's used_memory", labels=["server"])
    limit = GaugeMetricFamily(
        "lagwatch_redis_maxmemory_bytes", "Redis's maxmemory (0: no limit but the machine's)", labels=["server"]
    )
    for server in servers:
        may_evict.add_metric([server.server, server.policy], int(server.may_evict))
        evicted.add_metric([server.server], server.evicted_keys)
        used.add_metric([server.server], server.used_memory)
        limit.add_metric([server.server], server.maxmemory)
    return [may_evict, evicted, used, limit]


_RENDERED: dict[str, RenderedGroups] = {}  # per process, by spool directory: the scrape process keeps it


async def scrape_into(config: Config, redis: Redis, out: BinaryIO, spool_dir: str) -> None:
    """Writes the scrape's body into `out` (a file), keeping what can be reused next time under `spool_dir`."""
    rendered = _RENDERED.setdefault(spool_dir, RenderedGroups(spool_dir))
    keep = MetricsFilter(config)
    series, counters = Series(), Counters()
    store = WindowStore(redis, config.window())
    now = now_ms()
    found = await store.reads.list_clusters()
    instances: dict[tuple[str, str], int] = {}
    for cluster in sorted(set(config.clusters) | set(found)):
        instances.update({(cluster, s): n for s, n in (await running_counts(redis, cluster)).items()})
        counts = await store.reads.list_topics(cluster)
        rings = await store.reads.broker_rings(cluster, [(t, p) for t, n in counts.items() for p in range(n)])
        log_ends = {tp: ring[-1] for tp, ring in rings.items() if ring}
        await rendered.add(series, cluster, StoredResults(redis, cluster), log_ends, now, keep)
        add_topic_offsets(series, cluster, log_ends, keep)
        counters.add_ingest_totals(cluster, await read_totals(redis, cluster))
        raw = await reply(redis.hgetall(keys.evaluator_stats(cluster)))
        counters.add_evaluator_totals(cluster, {k.decode(): float(v) for k, v in raw.items()})
    series.write(out, keep.families)
    families = [*counters.families.values(), cluster_family(config.clusters, found), instances_family(instances)]
    out.write(render(families + redis_memory_families(await read_memory(redis))))


async def scrape_results(config: Config, redis: Redis) -> bytes:
    """The scrape's body in memory, rendered from nothing (for tests and small fleets)."""
    with tempfile.TemporaryDirectory() as spool, tempfile.TemporaryFile() as out:
        try:
            await scrape_into(config, redis, out, spool)
        finally:
            _RENDERED.pop(spool, None)
        out.seek(0)
        return out.read()
