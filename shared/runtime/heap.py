"""The C heap under a long-lived service: glibc keeps what a burst of work freed (a backlog read, a takeover's every
group evaluated) for the process, to reuse; a service whose burst is over gives it back to the system."""

from __future__ import annotations

import contextlib
import ctypes
import sys


def give_back_free_memory() -> None:
    """Return the heap's free pages to the system (glibc's `malloc_trim`; it keeps up to its trim threshold at the
    heap's top, and any amount below its highest block in use): worth doing once a burst is over, not after every
    batch (a trim walks the heap's free blocks)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).malloc_trim(0)
