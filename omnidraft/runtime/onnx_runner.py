"""The onnxruntime backend: an exported graph (see omnidraft/export/onnx_export.py)
behind the same runner interface as the eager model.

The KV cache lives in two numpy arrays owned by the runner; each call hands them
to the graph and takes the updated ones back. No torch model in memory.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import OmniDraftError
from .choices import Backend
from .runner import ModelRunner, Step


class OnnxRunner(ModelRunner):
    backend = Backend.ONNXRUNTIME

    def __init__(self, path, meta: dict, threads: int | None = None, name: str = "model"):
        import onnxruntime as ort

        rows = meta.get("max_logit_rows")  # the graph takes the rows whose logits it returns (targets)
        super().__init__(int(meta["vocab_size"]), int(meta["max_context"]), int(meta["max_tokens_per_call"]),
                         max_logit_rows=int(rows) if rows else None)  # full-length caches: no ring
        self.name = name
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        try:
            self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 - any load failure is a bad file for the user
            raise OmniDraftError(f"cannot load ONNX graph {path}: {str(e).splitlines()[0][:200]}") from e
        self._graph_head(meta)
        self._check_against(meta, path)
        self.keys = np.zeros(meta["kv_shape"], dtype=np.float32)
        self.values = np.zeros(meta["kv_shape"], dtype=np.float32)

    def _check_against(self, meta: dict, path) -> None:
        """bundle.json's numbers must be the graph's: its KV cache's shape and its vocabulary."""
        shapes = {i.name: i.shape for i in self.session.get_inputs()}
        vocab = self.session.get_outputs()[0].shape[-1]
        for key, want, have in (("kv_shape", list(meta["kv_shape"]), shapes.get("past_keys")),
                                ("vocab_size", self.vocab_size, vocab)):
            if have != want:
                raise OmniDraftError(f"bundle.json gives the {self.name} {key} {want}, but its graph "
                                     f"{Path(path).name} has {have}: re-export the bundle")

    def _forward(self, tokens: np.ndarray, start: int, n_logits: int) -> Step:
        feeds = {
            "input_ids": tokens.reshape(1, -1),
            "position_ids": np.arange(start, start + len(tokens), dtype=np.int64).reshape(1, -1),
            "past_keys": self.keys,
            "past_values": self.values,
        }
        if self.head is not None:
            feeds.update(head_weight=self.head.weight, head_bias=self.head.bias)
        if self.max_logit_rows:
            n = len(tokens)
            feeds["logit_rows"] = np.arange(n - n_logits, n, dtype=np.int64)
        logits, self.keys, self.values, *head = self.session.run(None, feeds)
        if not head:
            return Step(logits[0, -n_logits:])
        return Step(logits[0, -n_logits:], (head[0][0], float(head[1][0])))
