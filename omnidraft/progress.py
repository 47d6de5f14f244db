"""Progress for long steps: one stderr line per stage with elapsed seconds, and a line every
HEARTBEAT_S seconds while a stage runs on (an ExecuTorch lowering takes minutes)."""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager

HEARTBEAT_S = 30.0


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextmanager
def stage(name: str, heartbeat_s: float = HEARTBEAT_S):
    """Print `name ...` now, `name: still running (Ns)` every heartbeat_s while it runs, and
    `name done (N.Ns)` when the block ends (nothing more when it raises: the error is the next line)."""
    start = time.perf_counter()
    log(f"[omnidraft] {name} ...")
    finished = threading.Event()

    def beat() -> None:
        while not finished.wait(heartbeat_s):
            log(f"[omnidraft] {name}: still running ({time.perf_counter() - start:.0f}s)")

    ticker = threading.Thread(target=beat, daemon=True, name="omnidraft-progress")
    ticker.start()
    try:
        yield
    finally:
        finished.set()
        ticker.join()
    log(f"[omnidraft] {name} done ({time.perf_counter() - start:.1f}s)")


def quiet_libraries(progress_bars: bool = False) -> None:
    """Library chatter (deprecations, optional kernels not found) is not for users."""
    import logging
    import warnings

    import torch  # noqa: F401 - torch configures its loggers on import: quiet them after

    warnings.filterwarnings("ignore")
    quiet = ("torch", "torchao", "onnxscript", "onnx_ir", "executorch")
    for name in list(logging.root.manager.loggerDict):
        if name.split(".")[0] in quiet:
            logging.getLogger(name).setLevel(logging.ERROR)
    for name in quiet:
        logging.getLogger(name).setLevel(logging.ERROR)
    import transformers

    transformers.utils.logging.set_verbosity_error()
    if not progress_bars:
        transformers.utils.logging.disable_progress_bar()
