"""Give back the memory of the API server's short-lived connections.

The API server talks to the webhook over HTTP/1.1 with Go's http.Transport as client-go sets it
up: a new TLS connection for every request sent while the open ones are busy, at most 25 kept
idle, the rest closed right after their answer. A burst of creates (Jobs, then their pods) is a
burst of new connections, closed again a moment later: thousands in a few seconds under
bench_scale's jobs setup. On uvloop's event loop each costs the webhook 60 to 100 KiB while it
is open (OpenSSL's state, the pages of the loop's TLS read buffer it used, aiohttp's handler);
what made the resident size climb from burst to burst, and stay, is what glibc's allocator does
with that memory once it is freed:

- glibc raises its mmap threshold to the size of every mapped block freed, so once the first
  connection has closed, the 256 KiB TLS buffers of the next ones (the loop's read buffer, the
  result of each TLS read) come from the heap instead of mappings of their own, and the pages
  they touched stay resident after they are freed;
- the heap fragments: what a closed connection freed is reused only in part, so each burst
  touches new pages.

`keep_large_blocks_mapped` keeps the threshold at glibc's own starting value, so blocks of
128 KiB and more go back to the system as soon as they are freed (a mapping per TLS read costs
about 15 us), and `return_freed_memory` hands the free pages inside the heap back
(`malloc_trim`, about 1.5 ms) after every quarter of a second in which the server was busy: a
burst's connections leave the heap a few MiB bigger than the burst before unless the heap is
trimmed before the next one. Elsewhere than on glibc (musl), both do nothing.

Neither helps on asyncio's own event loop, whose TLS transport fills a 256 KiB read buffer with
zeros for every connection: 300 KiB resident per open connection whatever the allocator does.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import logging
from collections.abc import Callable, Hashable

log = logging.getLogger(__name__)

# <malloc.h>: the mallopt parameter of the size from which blocks get mappings of their own.
M_MMAP_THRESHOLD = -3
# glibc's own starting value; setting it (to any value) also stops glibc from raising it.
MMAP_THRESHOLD = 128 * 1024
TRIM_INTERVAL = 0.25


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The process's C library when it is glibc's (the image is Debian's), else None."""
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 -- glibc's alone: musl has no malloc_trim
        mallopt, malloc_trim = libc.mallopt, libc.malloc_trim
    except (OSError, AttributeError):
        return None
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    malloc_trim.argtypes, malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    return libc


def keep_large_blocks_mapped() -> bool:
    """Give blocks of `MMAP_THRESHOLD` and more mappings of their own for the rest of the
    process's life, so that they go back to the system when freed. False without glibc."""
    libc = _glibc()
    return libc is not None and int(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) == 1


def trim() -> bool:
    """Hand the heap's free pages back to the system; False when there were none to give back,
    or without glibc."""
    libc = _glibc()
    return libc is not None and int(libc.malloc_trim(0)) == 1


async def return_freed_memory(
    activity: Callable[[], Hashable], interval: float = TRIM_INTERVAL
) -> None:
    """Trim at the end of every `interval` in which `activity()` changed (requests received,
    connections opened or closed); an idle server costs nothing. Runs until cancelled."""
    if _glibc() is None:
        log.info("not returning freed memory to the system: the C library is not glibc")
        return
    last = activity()
    while True:
        await asyncio.sleep(interval)
        now = activity()
        if now != last:
            last = now
            trim()
