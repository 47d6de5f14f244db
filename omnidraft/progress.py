"""Progress for long steps: one stderr line per stage with elapsed seconds."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextmanager
def stage(name: str):
    """Print `name ...` now and `name done (N.Ns)` when the block ends."""
    start = time.perf_counter()
    log(f"[omnidraft] {name} ...")
    yield
    log(f"[omnidraft] {name} done ({time.perf_counter() - start:.1f}s)")
