"""The on-device adaptation graphs (`omnidraft export --with-training`).

Two ExecuTorch programs for the drafter, sharing one LoRA layout:
  - drafter_train.pte: one LoRA-only training step's forward and backward.
    Inputs are a fixed window of W draft tokens (the sequence length of a
    transformer graph is fixed at lowering) and the loss's rows, padded with
    zero weights: (ids [1, W], kl_rows [W], kl_target [W, |M|], kl_weight [W],
    nll_rows [W], nll_labels [W], nll_weight [W]) -> (loss, L_DM, L_ngram).
    Only the LoRA tensors are parameters (exposed, with gradients); the base
    weights are constants. The phone applies ExecuTorch's SGD to them.
  - drafter_lora.pte: the drafter's decoding graph (KV cache inside, XNNPACK)
    that takes the LoRA tensors as extra inputs, in the order of
    bundle.json's "lora_inputs". The runtime feeds the training program's
    current parameters, so an update is used by the very next drafter call;
    no re-export, no weight merging on the phone.
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..adaptation.examples import Example
from ..adaptation.lora import LoRAConfig, add_lora, lora_parameters
from ..adaptation.loss import hybrid_loss, logits_at
from ..progress import stage
from .executorch_export import lower_to_xnnpack
from .kv_wrapper import BufferKVModel, head_example, runner_meta


class TrainingStep(nn.Module):
    """The hybrid loss of one padded window, as a module whose first output is the loss."""

    def __init__(self, model, mapped_draft_ids: np.ndarray, lam: float):
        super().__init__()
        self.model = model
        self.register_buffer("mapped", torch.from_numpy(np.asarray(mapped_draft_ids, dtype=np.int64)))
        self.lam = lam

    def forward(self, ids, kl_rows, kl_target, kl_weight, nll_rows, nll_labels, nll_weight):
        rows = torch.cat([kl_rows, nll_rows])
        logits = logits_at(self.model, ids, rows)
        n = kl_rows.shape[0]
        loss, l_dm, l_ngram = hybrid_loss(
            logits[:n], kl_target, kl_weight, logits[n:], nll_labels, nll_weight, self.mapped, self.lam)
        return loss, l_dm.detach(), l_ngram.detach()  # only the loss is differentiated


def window_inputs(example: Example, window: int, n_mapped: int, pad_id: int = 0) -> list[torch.Tensor]:
    """An example's last `window` tokens as the training program's fixed-shape inputs."""
    return [torch.from_numpy(a) for a in example.padded(window, n_mapped, pad_id)]


def lora_model(model, lora: LoRAConfig):
    """A copy of the drafter with fresh LoRA adapters (eager attention: exportable backward)."""
    model = copy.deepcopy(model)
    model.config._attn_implementation = "eager"
    add_lora(model, lora)
    return model


def _core_aten_empty(ep):
    """SiLU's backward creates aten.empty_permuted, which the edge dialect rejects: use aten.empty."""
    for node in ep.graph.nodes:
        if node.op == "call_function" and node.target == torch.ops.aten.empty_permuted.default:
            size, _perm = node.args[:2]
            node.target = torch.ops.aten.empty.memory_format
            node.args = (size,)
    ep.graph_module.recompile()
    return ep


def export_training(model, path: Path, window: int, mapped_draft_ids, lam: float) -> dict:
    """drafter_train.pte from a drafter that already carries LoRA adapters."""
    from executorch.exir import EdgeCompileConfig, to_edge
    from torch.export.experimental import _export_forward_backward

    step = TrainingStep(model, mapped_draft_ids, lam)
    example = window_inputs(
        Example(np.ones(window, np.int64), np.zeros(0, np.int64), np.zeros((0, len(mapped_draft_ids)), np.float16),
                np.zeros(0, np.int64)), window, len(mapped_draft_ids))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with stage(f"executorch: export of the training step ({path.name}, window {window})"):
            ep = torch.export.export(step, tuple(example), strict=False)
            ep = _export_forward_backward(ep)
            ep = _core_aten_empty(ep)
        with stage(f"executorch: lowering {path.name} (portable kernels)"):
            program = to_edge(ep, compile_config=EdgeCompileConfig(_check_ir_validity=False)).to_executorch()
    path.write_bytes(program.buffer)
    return {"window": window, "lam": lam, "mapped": len(mapped_draft_ids)}


class LoRAInputModel(nn.Module):
    """The decoding graph with the LoRA tensors as inputs instead of weights (after the head's)."""

    def __init__(self, model, max_context: int):
        super().__init__()
        self.inner = BufferKVModel(model, max_context, exact_rows=False)
        self.names = [f"model.{n}" for n in lora_parameters(model)]

    def forward(self, input_ids, position_ids, head_weight, head_bias, *lora):
        return torch.func.functional_call(self.inner, dict(zip(self.names, lora)),
                                          (input_ids, position_ids, head_weight, head_bias),
                                          strict=False, tie_weights=False)


def export_lora_drafter(model, path: Path, max_context: int, max_tokens: int) -> dict:
    """drafter_lora.pte: decoding with LoRA tensors fed at every call (base weights on XNNPACK)."""
    model.config._attn_implementation = "sdpa"
    head = head_example(model)  # an eager call: before the wrapper switches the model's attention
    wrapper = LoRAInputModel(model.eval(), max_context).eval()
    lora = [p.detach().clone() for p in lora_parameters(model).values()]
    n = min(2, max_tokens)
    example = (torch.ones((1, n), dtype=torch.long), torch.arange(n).unsqueeze(0), *head, *lora)
    seq = torch.export.Dim("seq", min=1, max=max_tokens)
    dynamic = ({1: seq}, {1: seq}, None, None, tuple(None for _ in lora))  # *lora arrives as one tuple
    lower_to_xnnpack(wrapper, example, dynamic, path, strict=False)
    return {
        **runner_meta(model, max_context, max_tokens, head=True),
        "lora_inputs": [[n.removeprefix("model."), list(t.shape)] for n, t in zip(wrapper.names, lora)],
    }
