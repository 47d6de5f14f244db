"""What every benchmark script shares: step timing and writing its results."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from omnidraft.atomic import write_bytes_atomic


def step_ms(runner, prefix, k: int = 1, reps: int = 15) -> float:
    """Median ms of one k-token call after `prefix` (rolled back before every repetition)."""
    runner.reset()
    runner.forward(prefix, 0)
    times = []
    for _ in range(reps):
        runner.rollback(len(prefix))
        t = time.perf_counter()
        runner.forward(prefix[:k], len(prefix), k)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def save_results(out: Path, result: dict, render) -> None:
    """results.json and table.md (rendered by `render`) into `out`, atomically; print the table."""
    out.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(out / "results.json", json.dumps(result, indent=1, ensure_ascii=False).encode())
    table = render(result)
    write_bytes_atomic(out / "table.md", table.encode())
    print(table)
