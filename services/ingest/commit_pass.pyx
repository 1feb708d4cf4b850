# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""`BatchProcessor._pass` compiled: the ingest's per-record loop, the only code that runs for every record. It is
the fast path of each of the loop's steps, held to their Python reference by property tests (test_commit_pass.py):

* the loop (`BatchProcessor._python_pass`): over the same records, the same windows, tallies, positions, set-aside
  records and Redis contents;
* a commit's offset and timestamp, read in place for versions 0-3 (`offsets_codec.commit_offset_and_timestamp`);
* its ring's new newest entry, packed on the bytes (`_add_newest`; `window.add_to_ring`, the pure window);
* its history record (`HistoryWriter`; `history.HistoryMessages.add_commit`).

Everything else calls back into Python exactly where the Python loop would: unusual records (`_unusual`), the first
commit of an expired group (`_open_group`), a value of another version or a short one (`commit_offset_and_timestamp`,
which names the bad field), a commit at or before its ring's newest entry (`window.add_to_ring`).
"""

from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem, PyDict_SetItem
from cpython.object cimport PyObject
from cpython.set cimport PySet_Add
from libc.stdint cimport INT64_MAX, int64_t, uint64_t
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.string cimport memcmp, memcpy

from lagwatch.services.ingest.decimal_text cimport decimal_width, put_decimal

import functools
from lagwatch.shared.records.history import (
    MESSAGE_BYTES as _MESSAGE_BYTES, commit_group_head, commit_partition_head, commits_key,
)
from lagwatch.shared.windows.window import AddOutcome, add_to_ring as _add_to_ring
from lagwatch.shared.records import offsets_codec as codec
from lagwatch.shared.windows.ingest_totals import type_label
from lagwatch.shared.windows.window_writes import MAX_SCRIPT_NUMBER
cdef extern from "Python.h":
    # a borrowed item of a tuple or of a tuple subclass (a CommitKey): Cython's own indexing of an untyped object
    # takes the generic sequence path for a NamedTuple, a noticeable share of the pass
    PyObject* _item "PyTuple_GET_ITEM"(object, Py_ssize_t)

cdef enum:
    ENTRY = 48  # bytes per ring entry: six little-endian int64 (packing.COMMIT_ENTRY)
    HEADS_KEPT = 200_000  # groups (partitions, keys) whose history record parts are kept; then the cache starts over
cdef Py_ssize_t MESSAGE_BYTES = _MESSAGE_BYTES
heads_kept = HEADS_KEPT  # for tests
cdef int64_t MAX_EXACT = MAX_SCRIPT_NUMBER  # processor.MAX_EXACT: offsets beyond are not exact as doubles


cdef inline int64_t _be16(const unsigned char* p) noexcept:
    cdef int64_t v = (p[0] << 8) | p[1]
    return v - 0x10000 if v >= 0x8000 else v


cdef inline int64_t _be64(const unsigned char* p) noexcept:
    cdef uint64_t v = 0
    cdef int i
    for i in range(8):
        v = (v << 8) | p[i]
    return <int64_t>v


cdef inline int64_t _le64(const unsigned char* p) noexcept:
    cdef uint64_t v = 0
    cdef int i
    for i in range(7, -1, -1):
        v = (v << 8) | p[i]
    return <int64_t>v


cdef inline void _put_le64(unsigned char* p, int64_t value) noexcept:
    cdef uint64_t v = <uint64_t>value
    cdef int i
    for i in range(8):
        p[i] = v & 0xFF
        v >>= 8


cdef inline void _put_entry(
    unsigned char* p, int64_t offset, int64_t timestamp, int64_t observed, int64_t lag, int64_t order, int64_t first
) noexcept:
    _put_le64(p, offset)
    _put_le64(p + 8, timestamp)
    _put_le64(p + 16, observed)
    _put_le64(p + 24, lag)
    _put_le64(p + 32, order)
    _put_le64(p + 40, first)


cdef enum:  # what `_add_newest` did
    APPENDED, MERGED, EXPIRED, NO_LOG_END, OLDER  # OLDER: a commit at or before the newest entry, for the reference
FAST_OUTCOMES = (AddOutcome.APPENDED, AddOutcome.MERGED, AddOutcome.EXPIRED, AddOutcome.NO_BROKER_OFFSET)


cdef inline object _add_newest(
    object ring, int64_t offset, int64_t timestamp, int64_t order, int64_t observed, object latest, int64_t now,
    int64_t expire_ms, int64_t min_distance, Py_ssize_t keep_bytes, int* outcome,
):
    """`window.add_to_ring`'s common cases on the bytes: a commit expired or without a log end (None), a new newest
    entry appended or merged into the newest (the new ring). `ring`: None for none yet. Anything else is OLDER (None):
    a commit at or before the newest entry, or a ring not read in place here, which the reference decides."""
    cdef Py_ssize_t size
    cdef int64_t broker, lag, last_ts, last_first
    cdef const unsigned char* old
    cdef unsigned char* out
    cdef bytes new_ring
    if timestamp < now - expire_ms:
        outcome[0] = EXPIRED
        return None
    if latest is None:
        outcome[0] = NO_LOG_END
        return None
    broker = latest
    lag = broker - offset if broker > offset else 0
    if ring is None:
        new_ring = PyBytes_FromStringAndSize(NULL, ENTRY)
        _put_entry(<unsigned char*>PyBytes_AS_STRING(new_ring), offset, timestamp, observed, lag, order, order)
        outcome[0] = APPENDED
        return new_ring
    size = PyBytes_GET_SIZE(ring) if type(ring) is bytes else -1
    outcome[0] = OLDER
    if size < ENTRY or size % ENTRY != 0:
        return None
    old = <const unsigned char*>PyBytes_AS_STRING(ring)
    if order <= _le64(old + size - ENTRY + 32):
        return None
    last_ts, last_first = _le64(old + size - ENTRY + 8), _le64(old + size - ENTRY + 40)
    if timestamp - last_ts < min_distance:  # signed: window._merges_into_previous
        new_ring = PyBytes_FromStringAndSize(NULL, size)
        out = <unsigned char*>PyBytes_AS_STRING(new_ring)
        memcpy(out, old, size - ENTRY)
        _put_entry(out + size - ENTRY, offset, last_ts, observed, lag, order, last_first)
        outcome[0] = MERGED
        return new_ring
    if size > keep_bytes:  # the newest intervals - 1 entries stay beside the new one
        old += size - keep_bytes
        size = keep_bytes
    new_ring = PyBytes_FromStringAndSize(NULL, size + ENTRY)
    out = <unsigned char*>PyBytes_AS_STRING(new_ring)
    memcpy(out, old, size)
    _put_entry(out + size, offset, timestamp, observed, lag, order, order)
    outcome[0] = APPENDED
    return new_ring


def add_to_ring(ring, offset, timestamp, order, observed_at, latest_broker_offset, now_ms, config):
    """`window.add_to_ring` through the compiled steps (`_add_newest`, else the reference), for the property test
    that holds the two equal."""
    cdef int outcome
    new_ring = _add_newest(
        ring or None, offset, timestamp, order, observed_at, latest_broker_offset, now_ms, config.expire_group_ms,
        config.min_distance_ms, (config.intervals - 1) * ENTRY, &outcome,
    )
    if outcome == OLDER:
        return _add_to_ring(ring, offset, timestamp, order, observed_at, latest_broker_offset, now_ms, config)
    return FAST_OUTCOMES[outcome], new_ring


cdef inline bint _read_value(bytes value, int64_t* offset, int64_t* timestamp) noexcept:
    """Offset and commit timestamp of an OffsetCommitValue v0-v3 read in place; False: let Python decode it."""
    cdef Py_ssize_t size = PyBytes_GET_SIZE(value)
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(value)
    cdef int64_t version, n, at
    if size < 12:
        return False
    version = _be16(p)
    if version == 3:
        if size < 16:
            return False
        n = _be16(p + 14)
        at = 16 + n
    elif 0 <= version <= 2:
        n = _be16(p + 10)
        at = 12 + n
    else:
        return False
    if n < 0 or size < at + (16 if version == 1 else 8):
        return False
    offset[0] = _be64(p + 2)
    timestamp[0] = _be64(p + at)
    return True


cdef inline int64_t _be32(const unsigned char* p) noexcept:
    cdef int64_t v = (<int64_t>p[0] << 24) | (p[1] << 16) | (p[2] << 8) | p[3]
    return v - 0x100000000 if v >= 0x80000000 else v


cdef struct KeyParts:
    # an offset commit's key read in place: its group's and topic's UTF-8 bytes inside the key, its partition
    const char* group
    const char* topic
    Py_ssize_t group_size, topic_size
    int64_t partition


cdef inline bint _read_key(bytes key, KeyParts* parts) noexcept:
    """An offset commit's key (record type 0 or 1) read in place where `offsets_codec.decode_offset_commit_key`
    slices it (a well-formed one); False: let Python decode it."""
    cdef Py_ssize_t size = PyBytes_GET_SIZE(key), topic_at, partition_at
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(key)
    if size < 6 or p[0] != 0 or p[1] > 1 or p[2] >= 0x80:
        return False
    topic_at = 4 + ((p[2] << 8) | p[3])
    if size < topic_at + 2 or p[topic_at] >= 0x80:
        return False
    partition_at = topic_at + 2 + ((p[topic_at] << 8) | p[topic_at + 1])
    if size < partition_at + 4:
        return False
    parts.group, parts.group_size = <const char*>p + 4, topic_at - 4
    parts.topic, parts.topic_size = <const char*>p + topic_at + 2, partition_at - topic_at - 2
    parts.partition = _be32(p + partition_at)
    return True


cdef object _text(const char* p, Py_ssize_t size):
    """UTF-8 bytes as `bytes.decode` reads them; None for bytes it refuses (Python names the fault)."""
    try:
        return PyUnicode_DecodeUTF8(p, size, NULL)
    except UnicodeDecodeError:
        return None


cdef class KeyReader:
    """Offset-commit keys read in place into their group's name and their partition's field, with no entry per key:
    a key's group bytes are compared with the previous key's (a group's commits come together) and decoded when they
    differ, the group found by name among those held (`WindowCache.groups`: only accepted groups are held); its topic
    likewise, then its partition in `KeyCache.fields`. Anything else is Python's (`BatchProcessor._unusual`)."""

    cdef dict fields, groups
    cdef object group_key, topic_key  # the keys the group and the topic were read from: their bytes are pointed into
    cdef const char* group_at
    cdef const char* topic_at
    cdef Py_ssize_t group_size, topic_size
    cdef object by_partition  # `fields` of the topic read (None: not there)
    cdef readonly object group, topic_partition, field  # of the key read

    def __init__(self, dict fields, dict groups):
        self.fields, self.groups = fields, groups

    cdef bint read(self, bytes key):
        """The key's group (held), (topic, partition) and field, when it is a well-formed commit key all found."""
        cdef KeyParts parts
        cdef PyObject* found
        if not _read_key(key, &parts):
            return False
        if self.group_key is None or parts.group_size != self.group_size or memcmp(
            parts.group, self.group_at, parts.group_size
        ) != 0:
            self.group = _text(parts.group, parts.group_size)
            self.group_key, self.group_at, self.group_size = key, parts.group, parts.group_size
        if self.group is None or PyDict_GetItem(self.groups, self.group) is NULL:
            return False
        if self.topic_key is None or parts.topic_size != self.topic_size or memcmp(
            parts.topic, self.topic_at, parts.topic_size
        ) != 0:
            topic = _text(parts.topic, parts.topic_size)
            found = PyDict_GetItem(self.fields, topic) if topic is not None else NULL
            self.by_partition = <object>found if found is not NULL else None
            self.topic_key, self.topic_at, self.topic_size = key, parts.topic, parts.topic_size
        if self.by_partition is None:
            return False
        found = PyDict_GetItem(self.by_partition, parts.partition)
        if found is NULL:
            return False
        self.topic_partition, self.field = <object>_item(<object>found, 0), <object>_item(<object>found, 1)
        return True

    cdef void forget(self) noexcept:
        """Python may have changed what is held: the next key is looked up afresh."""
        self.group_key = self.topic_key = None

    def resolve(self, key):
        """`read`, for tests: (group, (topic, partition), field), or None."""
        return (self.group, self.topic_partition, self.field) if self.read(key) else None


cdef struct Pending:
    # a commit's history record, kept until it is encoded: its heads point into bytes the writer keeps alive
    int64_t offsets_partition
    const char* group_head
    const char* topic_head
    Py_ssize_t group_size, topic_size
    int64_t offset, timestamp, order, observed


cdef class HistoryWriter:
    """A pass's commits as history-topic messages (`history.HistoryMessages`, whose `add_commit` and `close` are the
    reference), each record byte for byte as `HistoryRecord.encode` writes it, a message (key `commits_key`) per
    run of an offsets partition's records, up to MESSAGE_BYTES.

    Two steps, so that the pass's thread does the least: `write` notes a record (its numbers, and where the parts
    naming its group and its partition are: `commit_group_head`, `commit_partition_head`, built once per cluster in
    the processor's `heads`); `encode` writes the messages, the text without the GIL, and is called by whoever
    needs them (`HistoryMessages.close`: the history publisher's thread, while the next batch is applied). The
    writer holds every heads cache its records point into: a full cache is replaced, never cleared."""

    cdef object messages  # the HistoryMessages this writer's records go to
    cdef list heads  # the processor's caches: [per group, per partition, keys per offsets partition]
    cdef list held  # caches this writer's records point into
    cdef object group_head, key_of  # build a group's head, an offsets partition's key (for this cluster)
    cdef object group  # the group of the last record written and its head
    cdef bytes head
    cdef Pending* pending
    cdef Py_ssize_t count, capacity

    def __cinit__(self):
        self.pending, self.count, self.capacity = NULL, 0, 0

    def __init__(self, messages, list heads, str cluster):
        self.messages, self.heads = messages, heads
        self.held = list(heads)
        self.group_head = functools.partial(commit_group_head, cluster)
        self.key_of = functools.partial(commits_key, cluster)
        messages.defer(self)

    def __dealloc__(self):
        PyMem_Free(self.pending)

    cdef int write(
        self, int64_t offsets_partition, str group, tuple tp,
        int64_t offset, int64_t timestamp, int64_t order, int64_t observed,
    ) except -1:
        cdef Pending* grown
        cdef Pending* r
        cdef bytes topic_head
        if self.count == self.capacity:
            grown = <Pending*>PyMem_Realloc(self.pending, (2 * self.capacity + 64) * sizeof(Pending))
            if grown is NULL:
                raise MemoryError()
            self.pending, self.capacity = grown, 2 * self.capacity + 64
        if self.group is None or (group is not self.group and group != self.group):
            self.group, self.head = group, self._kept(0, group, self.group_head)
        topic_head = self._kept(1, tp, commit_partition_head)
        r = &self.pending[self.count]
        r.offsets_partition, r.observed = offsets_partition, observed
        r.offset, r.timestamp, r.order = offset, timestamp, order
        r.group_head, r.group_size = PyBytes_AS_STRING(self.head), PyBytes_GET_SIZE(self.head)
        r.topic_head, r.topic_size = PyBytes_AS_STRING(topic_head), PyBytes_GET_SIZE(topic_head)
        self.count += 1
        return 0

    cdef object _kept(self, int which, object key, object build):
        """`heads[which][key]`, built by `build(key)` the first time; past HEADS_KEPT entries the processor gets a
        new cache, and this writer keeps the old one (its records point into it)."""
        cdef dict cache = self.heads[which]
        cdef PyObject* found = PyDict_GetItem(cache, key)
        if found is not NULL:
            return <object>found
        if len(cache) >= HEADS_KEPT:
            cache = self.heads[which] = {}
            self.held.append(cache)
        value = cache[key] = build(key)
        return value

    def add(self, offsets_partition, str group, tuple tp, offset, timestamp, order, observed):
        """`write`, for tests."""
        self.write(offsets_partition, group, tp, offset, timestamp, order, observed)

    def encode(self, list messages):
        """Append the records' messages, as (key, value), to `messages`; the records are then forgotten."""
        cdef Py_ssize_t count = self.count, size = 0, i
        cdef char* text = NULL
        cdef Py_ssize_t* starts = <Py_ssize_t*>PyMem_Malloc((count + 1) * sizeof(Py_ssize_t))
        if starts is NULL:
            raise MemoryError()
        try:
            for i in range(count):  # an upper bound of the text: every record with its newline
                size += self.pending[i].group_size + self.pending[i].topic_size + 4 * 20 + 46
            text = <char*>PyMem_Malloc(size + 1)
            if text is NULL:
                raise MemoryError()
            with nogil:
                size = _encode(self.pending, count, text, starts)
            for i in range(count):
                if starts[i] >= 0:
                    key = self._kept(2, self.pending[i].offsets_partition, self.key_of)
                    value = PyBytes_FromStringAndSize(text + starts[i], _end(starts, i, count, size) - starts[i])
                    messages.append((key, value))
        finally:
            PyMem_Free(text)
            PyMem_Free(starts)
        self.count = 0


cdef Py_ssize_t _end(const Py_ssize_t* starts, Py_ssize_t i, Py_ssize_t count, Py_ssize_t size) noexcept:
    """Where the message beginning at record i ends: where the next one begins, or at the end of the text."""
    cdef Py_ssize_t j = i + 1
    while j < count and starts[j] < 0:
        j += 1
    return size if j == count else starts[j]


cdef Py_ssize_t _encode(const Pending* pending, Py_ssize_t count, char* text, Py_ssize_t* starts) noexcept nogil:
    """The records' text into `text`, messages back to back; starts[i] is where record i's message begins when it
    begins one, else -1 (HistoryMessages.add's rule: a new message when the offsets partition changes or the open one
    holds MESSAGE_BYTES). Returns the size written."""
    cdef Py_ssize_t size = 0, message_at = 0, i
    cdef const Pending* r
    cdef char* p
    cdef int64_t open_partition = -1
    cdef int w1, w2, w3, w4
    for i in range(count):
        r = &pending[i]
        p = text + size
        if open_partition < 0 or r.offsets_partition != open_partition or size - message_at >= MESSAGE_BYTES:
            starts[i], message_at, open_partition = size, size, r.offsets_partition
        else:
            starts[i] = -1
            p[0] = b'\n'
            p += 1
        w1, w2 = decimal_width(r.offset), decimal_width(r.timestamp)
        w3, w4 = decimal_width(r.order), decimal_width(r.observed)
        memcpy(p, r.group_head, r.group_size)
        p += r.group_size
        memcpy(p, r.topic_head, r.topic_size)
        p = put_decimal(p + r.topic_size, r.offset, w1)
        memcpy(p, b',"commit_timestamp":', 20)
        p = put_decimal(p + 20, r.timestamp, w2)
        memcpy(p, b',"order":', 9)
        p = put_decimal(p + 9, r.order, w3)
        memcpy(p, b',"observed_at":', 15)
        p = put_decimal(p + 15, r.observed, w4)
        p[0] = b'}'
        size = p + 1 - text
    return size


def run_pass(processor, records, batch, bint defer):
    """The pass over `records` for `processor` (a BatchProcessor), into `batch` (an AppliedBatch)."""
    cdef dict groups = processor.cache.groups, dirty = processor.cache.dirty, touched = batch.touched
    cdef dict latest = processor.broker_offsets.latest, since = processor.broker_offsets.since
    # per offsets partition, its coordinator's clock offset (absent: commits taken as made when read)
    cdef dict clock_offsets = processor.clock_offsets
    cdef bint clock_known = False
    cdef int64_t offset_ms = 0, made
    log_end_at = processor.broker_offsets.log_end_at
    config = processor.store.config
    cdef int64_t expire_ms = config.expire_group_ms, min_distance = config.min_distance_ms
    cdef Py_ssize_t keep_bytes = (config.intervals - 1) * ENTRY
    tally = batch.tally
    cdef dict positions = batch.positions, waiting = batch.waiting
    cdef list deferred = batch.deferred
    cdef bint keep = processor.keep_commits
    cdef KeyReader reader = KeyReader(processor.keys.fields, groups)
    cdef HistoryWriter history = HistoryWriter(batch.history, processor.history_heads, processor.cluster) if keep else None
    cdef int64_t now = batch.observed_at
    cdef dict reread = processor.reread_until  # empty but after a rewind (BatchProcessor.read_again)
    cdef int64_t reread_below = -1  # the records in hand: below this order, read again
    # the timestamps of the records in hand's commits read for the first time, oldest and newest (commit_clock.py)
    cdef int64_t oldest = MAX_EXACT, newest = -1
    unusual, open_group = processor._unusual, processor._open_group
    cdef Py_ssize_t counts[4]  # outcomes of `_add_newest`, by its code
    counts[:] = [0, 0, 0, 0]
    cdef int outcome
    others = {}  # outcomes the reference decided

    cdef object current_name = None, current = None, rings = None, changed = None
    cdef int64_t current_last = 0  # `current.last`, kept here while the run lasts (-1: None)
    cdef bint last_moved = False
    cdef object part_now = None  # the offsets partition of the records in hand, and the position after them
    cdef int64_t position = 0

    cdef object record, key, value, commit_key, group, field_name, ring, tp, last, broker_offset, new_ring
    cdef PyObject* found
    cdef int64_t order, committed, timestamp

    for record in records:
        key, value, order = record.key(), record.value(), record.offset()
        partition = record.partition()
        if part_now is None or partition != part_now:
            if part_now is not None:
                positions[part_now] = position
                if newest >= 0:
                    batch.read_first(part_now, oldest, newest)
                    oldest, newest = MAX_EXACT, -1
            part_now = partition
            if reread:
                found = PyDict_GetItem(reread, partition)
                reread_below = <int64_t><object>found if found is not NULL else -1
            found = PyDict_GetItem(clock_offsets, partition)
            clock_known = found is not NULL
            offset_ms = <int64_t><object>found if clock_known else 0
        position = order + 1
        if value and type(key) is bytes and reader.read(<bytes>key):
            group, tp, field_name = reader.group, reader.topic_partition, reader.field
        else:
            if last_moved:
                current.last, last_moved = current_last, False
            reader.forget()
            commit_key = unusual(record, key, batch, defer)
            if commit_key is None:
                current_name = None  # a tombstone or a rebalance may have replaced the group's rings
                continue
            group, tp = <object>_item(commit_key, 0), <object>_item(commit_key, 4)
            field_name = <object>_item(commit_key, 3)
        if group in waiting or (defer and (group not in groups or tp not in latest)):
            waiting[group] = partition
            deferred.append(record)
            continue
        if type(value) is not bytes or not _read_value(<bytes>value, &committed, &timestamp):
            try:
                committed, timestamp = codec.commit_offset_and_timestamp(value)
            except codec.CodecError as exc:
                tally[f"decode_error:{type_label(exc.record_type, key or b'')}"] += 1
                continue
            except OverflowError:  # beyond int64: out of range like any value past MAX_EXACT
                tally["decode_error:out-of-range"] += 1
                continue
        if not (0 <= committed < MAX_EXACT and 0 <= timestamp < MAX_EXACT):
            tally["decode_error:out-of-range"] += 1
            continue
        found = PyDict_GetItem(latest, tp)
        broker_offset = <object>found if found is not NULL else None
        made = timestamp + offset_ms if clock_known and timestamp + offset_ms < now else now
        found = PyDict_GetItem(since, tp)
        if found is not NULL and made < <int64_t><object>found:  # the log end moved since: the reference's case
            broker_offset = log_end_at(tp, made, batch.histories, defer)
            if defer and broker_offset is None:
                waiting[group] = partition
                deferred.append(record)
                continue
        if order >= reread_below:
            oldest, newest = min(oldest, timestamp), max(newest, timestamp)
        if keep:
            history.write(partition, group, tp, committed, timestamp, order,
                          now if order >= reread_below else min(now, timestamp))
        if current_name is None or (group is not current_name and group != current_name):
            if last_moved:
                current.last, last_moved = current_last, False
            current_name, current = group, groups[group]
            last = current.last
            if last is not None and last < now - expire_ms:  # an expired group starts afresh: Python's _open_group
                rings, changed = open_group(group, current, batch)
            else:  # _open_group's common case
                PyDict_SetItem(dirty, group, current)
                PyDict_SetItem(touched, current.group, "commits")  # the cache's copy of the name (_open_group)
                rings, changed = current.rings, current.changed
                if changed is None:
                    changed = current.changed = set()
            try:
                current_last = -1 if current.last is None else current.last
            except OverflowError:  # not a timestamp lagwatch wrote: compare as Python would
                current_last = INT64_MAX if current.last > 0 else -1
        found = PyDict_GetItem(rings, field_name)
        ring = <object>found if found is not NULL else None
        new_ring = _add_newest(
            ring, committed, timestamp, order, now, broker_offset, now, expire_ms, min_distance, keep_bytes, &outcome
        )
        if outcome == OLDER:  # the reference decides
            added, new_ring = _add_to_ring(ring, committed, timestamp, order, now, broker_offset, now, config)
            others[added] = others.get(added, 0) + 1
        else:
            counts[outcome] += 1
        if new_ring is None:
            continue
        PyDict_SetItem(rings, field_name, new_ring)
        PySet_Add(changed, field_name)
        if current_last < 0 or timestamp > current_last:
            current_last, last_moved = timestamp, True
    if last_moved:
        current.last = current_last
    if part_now is not None:
        positions[part_now] = position
        if newest >= 0:
            batch.read_first(part_now, oldest, newest)
    for i in range(4):
        others[FAST_OUTCOMES[i]] = others.get(FAST_OUTCOMES[i], 0) + counts[i]
    for added, n in others.items():
        if n:
            tally[f"outcome:{added.name.lower()}"] += n
