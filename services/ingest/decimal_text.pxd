# cython: language_level=3
"""Integers written as decimal text into C buffers, for the compiled modules (commit_pass.pyx: history records;
flush_encoding.pyx: the Redis protocol). Inline: each module compiles its own copy."""

from libc.stdint cimport int64_t, uint64_t


cdef inline int decimal_width(int64_t value) noexcept nogil:
    """How many characters `value` takes in decimal, a sign included."""
    cdef int n = 1 if value < 0 else 0
    cdef uint64_t v = <uint64_t>(-value) if value < 0 else <uint64_t>value
    while True:
        n += 1
        v //= 10
        if v == 0:
            return n


cdef inline char* put_decimal(char* p, int64_t value, int width) noexcept nogil:
    """Write `value` at p in the `width` characters `decimal_width` gave; returns the end."""
    cdef uint64_t v = <uint64_t>(-value) if value < 0 else <uint64_t>value
    cdef char* end = p + width
    cdef char* q = end
    if value < 0:
        p[0] = b'-'
    while True:
        q -= 1
        q[0] = <char>(48 + v % 10)
        v //= 10
        if v == 0:
            return end
