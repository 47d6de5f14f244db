"""Give the heap pages a training step freed back to the OS.

An update allocates and frees hundreds of MB of activations and gradients whose
sizes change with every batch. glibc keeps such freed pages in its arenas, and
the varying sizes fragment them, so a long session's resident memory creeps up
update after update (+19% over 1,000 generations in the soak) although nothing
is leaked: after malloc_trim the process is back at its first size. Trimming
after each update keeps a session's memory flat, which a phone's memory killer
cares about. Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _malloc_trim():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to trim
        return None


def release_free_memory() -> bool:
    """Return freed heap memory to the OS; True if the C library could."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False
