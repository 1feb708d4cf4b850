# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""`WindowCache.take_writes` and `write_commands` (shared/windows/group_windows.py) compiled into one step: what
changed in the window cache since the last flush, written straight into the Redis protocol (RESP) in one buffer.

The Python path is the reference: it builds a `GroupWrite` per touched group, a tuple per command, and hiredis
packs each argument, a large share of an ingest worker's busy time. Here each argument is copied once into the
buffer. Tests require the same bytes, probes and cache state as the reference
(tests/services/ingest/test_flush_encoding.py). Redis Cluster takes the reference path: its pipeline routes each
command to its slot's node.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.object cimport PyObject
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.stdint cimport int64_t
from libc.string cimport memcpy

from lagwatch.services.ingest.decimal_text cimport decimal_width, put_decimal

from lagwatch.shared.protocol import keys
from lagwatch.services.ingest.window_cache import PackedWrites
cdef tuple KINDS = keys.GROUP_KEY_KINDS
cdef str WINDOWS = keys.WINDOWS_KIND, META = keys.META_KIND


cdef struct Buffer:
    char* data
    Py_ssize_t size
    Py_ssize_t capacity


cdef char* _reserve(Buffer* buf, Py_ssize_t more) except NULL:
    """Room for `more` bytes at the end; returns where they go."""
    cdef Py_ssize_t capacity = buf.capacity
    cdef char* grown
    if buf.size + more > capacity:
        while capacity < buf.size + more:
            capacity = capacity * 2 if capacity else 1 << 16
        grown = <char*>PyMem_Realloc(buf.data, capacity)
        if grown is NULL:
            raise MemoryError()
        buf.data, buf.capacity = grown, capacity
    return buf.data + buf.size


cdef int _header(Buffer* buf, char kind, int64_t n) except -1:
    """A RESP header line: `*<n>` (a command of n arguments) or `$<n>` (an argument of n bytes)."""
    cdef int width = decimal_width(n)
    cdef char* p = _reserve(buf, width + 3)
    p[0] = kind
    p = put_decimal(p + 1, n, width)
    p[0], p[1] = b'\r', b'\n'
    buf.size += width + 3
    return 0


cdef int _bulk(Buffer* buf, const char* data, Py_ssize_t size) except -1:
    cdef char* p
    _header(buf, b'$', size)
    p = _reserve(buf, size + 2)
    memcpy(p, data, size)
    p[size], p[size + 1] = b'\r', b'\n'
    buf.size += size + 2
    return 0


cdef int _arg(Buffer* buf, object value) except -1:
    """One argument as hiredis packs it: bytes as they are, text as UTF-8, an int in decimal."""
    cdef Py_ssize_t size
    cdef const char* text
    cdef int64_t number
    cdef int width
    cdef char* p
    if type(value) is bytes:
        return _bulk(buf, PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value))
    if type(value) is str:
        text = PyUnicode_AsUTF8AndSize(value, &size)
        return _bulk(buf, text, size)
    if type(value) is int:
        number = value
        width = decimal_width(number)
        _header(buf, b'$', width)
        p = put_decimal(_reserve(buf, width + 2), number, width)
        p[0], p[1] = b'\r', b'\n'
        buf.size += width + 2
        return 0
    raise TypeError(f"not a Redis argument here: {type(value).__name__}")


cdef int _key(Buffer* buf, tuple around, str group, str kind) except -1:
    """One of a group's keys (`keys.group_keys`): the cluster's text `around` the group's name (`_around_group`),
    its name, and the letter of `kind`."""
    cdef bytes before = around[0], after = around[1]
    cdef Py_ssize_t size, kind_size, before_size = PyBytes_GET_SIZE(before), after_size = PyBytes_GET_SIZE(after)
    cdef const char* text = PyUnicode_AsUTF8AndSize(group, &size)
    cdef const char* letter = PyUnicode_AsUTF8AndSize(kind, &kind_size)
    cdef Py_ssize_t total = before_size + size + after_size + kind_size
    cdef char* p
    _header(buf, b'$', total)
    p = _reserve(buf, total + 2)
    memcpy(p, PyBytes_AS_STRING(before), before_size)
    memcpy(p + before_size, text, size)
    memcpy(p + before_size + size, PyBytes_AS_STRING(after), after_size)
    memcpy(p + total - kind_size, letter, kind_size)
    p[total], p[total + 1] = b'\r', b'\n'
    buf.size += total + 2
    return 0


cdef tuple _around_group(str cluster):
    """What comes before and after a group's name in its keys' stem (`keys.group_key_stem`), as UTF-8."""
    before, _, after = keys.group_key_stem(cluster, "\0").partition("\0")
    return before.encode(), after.encode()


cdef class _Commands:
    """The buffer and how many commands it holds."""

    cdef Buffer buf
    cdef Py_ssize_t count

    def __dealloc__(self):
        PyMem_Free(self.buf.data)

    cdef int start(self, Py_ssize_t args, bytes name) except -1:
        """A command's header and name; its `args - 1` other arguments follow (`_arg`)."""
        _header(&self.buf, b'*', args)
        _bulk(&self.buf, PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name))
        self.count += 1
        return 0

    cdef int command(self, bytes name, tuple args) except -1:
        self.start(1 + len(args), name)
        for value in args:
            _arg(&self.buf, value)
        return 0

    cdef bytes payload(self):
        return PyBytes_FromStringAndSize(self.buf.data, self.buf.size)


def encode_flush(cache, str cluster):
    """What `cache` (a WindowCache) changed since the last flush, as `PackedWrites`; marks it flushed, exactly as
    `take_writes` does."""
    cdef _Commands out = _Commands()
    cdef int64_t slack = cache.expiry_slack_ms, expire_ms = cache.config.expire_group_ms
    cdef list probes = [], deleted = [], newest = []
    index = keys.groups_index(cluster)
    cdef tuple around = _around_group(cluster)
    for group, cached in cache.dirty.items():
        if cached.changed or cached.replace or cached.removed:
            _group(out, group, around, cached, expire_ms, slack, probes, deleted, newest)
    cache.dirty = {}
    if deleted:
        out.command(b"ZREM", (index, *deleted))
    if newest:
        out.start(3 + len(newest), b"ZADD")
        _arg(&out.buf, index)
        _arg(&out.buf, "GT")
        for value in newest:
            _arg(&out.buf, value)
        out.command(b"SADD", (keys.CLUSTERS, cluster))
    return PackedWrites(out.payload(), out.count, tuple(probes))


cdef int _group(
    _Commands out, group, tuple around, cached, int64_t expire_ms, int64_t slack, list probes, list deleted,
    list newest,
) except -1:
    """One touched group's commands (`group_commands`' order), its probe, and its cache entry marked flushed."""
    cdef PyObject* found
    cdef dict rings
    cdef object expires_at = None
    changed, removed, replace = cached.changed, cached.removed, cached.replace
    cdef str own_name = cached.group  # the group, as the cache holds it
    last = cached.last
    if last is not None and (replace or last + expire_ms > cached.expires_at):  # a DEL took the old expiry
        expires_at = cached.expires_at = last + expire_ms + slack
    if replace:
        out.start(1 + len(KINDS), b"DEL")
        for kind in KINDS:
            _key(&out.buf, around, own_name, kind)
        deleted.append(group)
    if removed:
        out.start(2 + len(removed), b"HDEL")
        _key(&out.buf, around, own_name, WINDOWS)
        for name in removed:
            _arg(&out.buf, name)
    if changed:
        rings = cached.rings
        out.start(2 + 2 * len(changed), b"HSET")
        _key(&out.buf, around, own_name, WINDOWS)
        for name in changed:
            found = PyDict_GetItem(rings, name)
            if found is NULL:
                raise KeyError(name)
            _arg(&out.buf, name)
            _arg(&out.buf, <object>found)
    if last is not None:
        if cached.had_last and not replace:
            probes.append((out.count, group))
        out.start(4, b"HSET")
        _key(&out.buf, around, own_name, META)
        _arg(&out.buf, "last")
        _arg(&out.buf, last)
        newest.append(last)
        newest.append(group)
    if expires_at is not None:
        for kind in KINDS:
            out.start(3, b"PEXPIREAT")
            _key(&out.buf, around, own_name, kind)
            _arg(&out.buf, expires_at)
    cached.had_last = last is not None
    cached.changed = cached.removed = None
    cached.replace = False
    return 0
