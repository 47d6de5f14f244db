"""The ExecuTorch backend: a .pte program behind the runner interface.

The KV cache is a mutable buffer inside the program, so a call only passes the
tokens and their positions; rollback is free (positions are simply rewritten).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path

import numpy as np

from ..errors import OmniDraftError
from .choices import Backend
from .runner import ModelRunner, Step


class ExecuTorchRunner(ModelRunner):
    backend = Backend.EXECUTORCH

    def __init__(self, path, meta: dict, name: str = "model", extra_shapes: list | None = None):
        path = Path(path)
        import torch
        from executorch.runtime import Runtime

        rows = meta.get("max_logit_rows")  # the graph takes the rows whose logits it returns (targets)
        super().__init__(int(meta["vocab_size"]), int(meta["max_context"]), int(meta["max_tokens_per_call"]),
                         max_logit_rows=int(rows) if rows else None, ring_slack=self.slack(meta))
        self.name = name
        self._torch = torch
        # Extra graph inputs this runner owns, e.g. the LoRA tensors of drafter_lora.pte: zero (the drafter as
        # exported) until a learner writes its updated weights into them.
        self.extra_inputs = [torch.zeros(shape) for shape in extra_shapes or []]
        self._graph_head(meta)
        load_custom_ops(meta.get("executorch_ops", []))
        try:
            with _quiet_stderr():  # the C++ runtime logs CPU probing noise on first use
                program = Runtime.get().load_program(str(path))
                self.method = program.load_method("forward")
        except Exception as e:  # noqa: BLE001 - a corrupt or foreign program is a user problem
            raise OmniDraftError(f"cannot load ExecuTorch program {path}: {str(e).splitlines()[0][:200]}") from e
        self._check_against(program.metadata("forward"), path)

    def _check_against(self, meta, path) -> None:
        """bundle.json's numbers must be the program's: its inputs' and output's largest shapes (tokens a call,
        rows of logits, vocabulary), and a one-token call at the last position of the context it claims."""
        rows = self.max_logit_rows or self.max_tokens_per_call
        have = {"max_tokens_per_call": meta.input_tensor_meta(0).sizes()[1], "vocab_size": meta.output_tensor_meta(0).sizes()[-1],
                "max_logit_rows": meta.output_tensor_meta(0).sizes()[1]}
        want = {"max_tokens_per_call": self.max_tokens_per_call, "vocab_size": self.vocab_size, "max_logit_rows": rows}
        for key in want:
            if have[key] != want[key]:
                raise OmniDraftError(f"bundle.json gives the {self.name} {key} {want[key]}, but its program "
                                     f"{path.name} has {have[key]}: re-export the bundle")
        try:
            with _quiet_stderr():  # a failing call logs the kernel's check to file descriptor 2
                self._forward(np.zeros(1, dtype=np.int64), self.max_context - 1, 1)  # junk there is never read
        except Exception:  # noqa: BLE001 - the program's own error says only "failed"
            raise OmniDraftError(f"bundle.json gives the {self.name} a context of {self.max_context} positions, more "
                                 f"than its program {path.name} holds: re-export the bundle") from None

    def _forward(self, tokens: np.ndarray, start: int, n_logits: int) -> Step:
        torch = self._torch
        ids = torch.from_numpy(np.ascontiguousarray(tokens)).reshape(1, -1)
        n = len(tokens)
        pos = torch.arange(start, start + n, dtype=torch.long).reshape(1, -1)
        rows = [torch.arange(n - n_logits, n, dtype=torch.long)] if self.max_logit_rows else []
        outputs = self.method.execute([ids, pos, *rows, *self._head_inputs(), *self.extra_inputs])
        logits = outputs[0][0, -n_logits:].numpy()
        if self.head is None:
            return Step(logits)
        return Step(logits, (outputs[1][0].numpy(), float(outputs[2][0])))


CUSTOM_OPS = {  # operator libraries a bundle's programs may need besides the default kernels
    "llama": "executorch.extension.llm.custom_ops.custom_ops",  # ExecuTorch's LLM ops (update_cache, custom_sdpa)
    "quantized": "executorch.kernels.quantized",  # quantized embedding lookups (--embedding-quant)
}


def load_custom_ops(names: list[str]) -> None:
    """Register the kernels of the custom operator libraries a program was exported with."""
    import importlib

    for name in names:
        if name not in CUSTOM_OPS:
            raise OmniDraftError(f"the program needs custom operators {name!r}, unknown to this omnidraft; "
                                 "update omnidraft or re-export the bundle")
        try:
            importlib.import_module(CUSTOM_OPS[name])
        except (ImportError, OSError) as e:
            raise OmniDraftError(f"the program needs ExecuTorch's {name} custom operators, which this "
                                 f"executorch installation cannot load ({str(e).splitlines()[0][:120]})") from None


@contextlib.contextmanager
def _quiet_stderr():
    """Silence the runtime's start-up logging, whether it writes to file descriptor 2 or to sys.stderr."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
