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
