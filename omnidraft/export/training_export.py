"""The on-device adaptation graphs (`omnidraft export --with-training`).

Two ExecuTorch programs for the drafter, sharing one LoRA layout:
  - drafter_train.pte: one whole update step as a pure function. Method
    "forward" takes the LoRA tensors, their two Adam moments (each in
    bundle.json's "lora_inputs" order), the step number and the learning
    rate (0-d float32), then a padded batch of B
    windows of W draft tokens (ids [B, W]; flat rows into B*W with their
    targets and 0/1 weights: kl_rows, kl_target [B*W, mapped] float32, kl_weight,
    nll_rows, nll_labels, nll_weight). It returns (loss, L_DM, L_ngram, then
    the updated LoRA tensors and moments in the same order): the hybrid loss's
    gradients, clipped, then Adam (adaptation/update_rule.py), so the phone
    needs no optimizer and no training runtime. Method "lora_init" returns the
    fresh adapters (B zero, A random), the state a new profile starts from.
  - drafter_lora.pte: the drafter's decoding graph (KV cache inside, XNNPACK)
    that takes the LoRA tensors as extra inputs, in the order of
    bundle.json's "lora_inputs". The runtime feeds the learner's current
    tensors, so an update is used by the very next drafter call; no
    re-export, no weight merging on the phone.

The backward is traced with make_fx (torch's autograd, recorded as plain aten
operations) and exported as an ordinary inference program, on portable kernels
(the default) or XNNPACK (`--train-kernels xnnpack`: the forward and backward matmuls
delegated; the same step on tiny models, but lowering SmolLM2-135M needs over 23 GB).
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..adaptation.examples import Example, padded_batch
from ..adaptation.lora import LoRAConfig, add_lora, lora_parameters
from ..adaptation.loss import hybrid_loss, logits_at
from ..adaptation.update_rule import RULE, clipped_adam
from ..progress import stage
from .executorch_export import lower_to_xnnpack
from .kv_wrapper import BufferKVModel, head_example, runner_meta


class BatchLoss(nn.Module):
    """The hybrid loss of one padded batch (examples.padded_batch), pooled over its weighted rows
    exactly as the eager learner pools a batch."""

    def __init__(self, model, mapped_draft_ids: np.ndarray, lam: float):
        super().__init__()
        self.model = model
        self.register_buffer("mapped", torch.from_numpy(np.asarray(mapped_draft_ids, dtype=np.int64)))
        self.lam = lam

    def forward(self, ids, kl_rows, kl_target, kl_weight, nll_rows, nll_labels, nll_weight):
        logits = logits_at(self.model, ids, torch.cat([kl_rows, nll_rows]))
        n = kl_rows.shape[0]
        return hybrid_loss(logits[:n], kl_target, kl_weight, logits[n:], nll_labels, nll_weight,
                           self.mapped, self.lam)


def update_step(model, mapped_draft_ids, lam: float):
    """f(*lora, *exp_avg, *exp_avg_sq, step, lr, *batch) -> (loss, L_DM, L_ngram, *lora', *exp_avg', *exp_avg_sq')."""
    loss_of = BatchLoss(model, mapped_draft_ids, lam)
    names = list(lora_parameters(model))
    n = len(names)

    def batch_loss(lora, batch):
        loss, l_dm, l_ngram = torch.func.functional_call(loss_of, {f"model.{k}": t for k, t in zip(names, lora)},
                                                         tuple(batch), strict=False, tie_weights=False)
        return loss, (loss, l_dm, l_ngram)

    def step(*flat):
        lora, m, v, t, lr, batch = flat[:n], flat[n : 2 * n], flat[2 * n : 3 * n], flat[3 * n], flat[3 * n + 1], \
            flat[3 * n + 2 :]
        grads, losses = torch.func.grad(batch_loss, has_aux=True)(list(lora), batch)
        new = clipped_adam(lora, grads, m, v, t, lr, RULE)
        return (*(x.detach() for x in losses), *new[0], *new[1], *new[2])

    return step


class _Init(nn.Module):
    """Method "lora_init": the fresh adapters (copies, so that the caller may update them in place)."""

    def __init__(self, tensors: list[torch.Tensor]):
        super().__init__()
        self.tensors = nn.ParameterList([nn.Parameter(t.detach().clone(), requires_grad=False) for t in tensors])

    def forward(self):
        return tuple(t.clone() for t in self.tensors)


def lora_model(model, lora: LoRAConfig):
    """A copy of the drafter with fresh LoRA adapters (eager attention: a traceable backward)."""
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


def example_batch(batch: int, window: int, n_mapped: int) -> list[torch.Tensor]:
    """A batch of one all-token example (every row weighted): what the export traces with."""
    e = Example(np.ones(window, np.int64), np.arange(window - 1), np.zeros((window - 1, n_mapped), np.float16),
                np.zeros(0, np.int64))
    return [torch.from_numpy(a) for a in padded_batch([e], batch, window, n_mapped)]


def export_training(model, path: Path, window: int, batch: int, mapped_draft_ids, lam: float,
                    kernels: str = "portable") -> dict:
    """drafter_train.pte from a drafter that already carries LoRA adapters (their values are lora_init's)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower
    from torch.fx.experimental.proxy_tensor import make_fx

    lora = [p.detach().clone() for p in lora_parameters(model).values()]
    moments = [torch.zeros_like(t) for t in lora + lora]  # distinct tensors: aliased inputs would be traced as one
    args = (*lora, *moments, torch.tensor(1.0), torch.tensor(1e-4),
            *example_batch(batch, window, len(mapped_draft_ids)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with stage(f"executorch: tracing the update step's forward and backward ({path.name}, {batch} x {window})"):
            graph = make_fx(update_step(model, mapped_draft_ids, lam), tracing_mode="real")(*args)
        with stage(f"executorch: torch.export of {path.name}"):
            methods = {"forward": _core_aten_empty(torch.export.export(graph, args, strict=False).run_decompositions()),
                       "lora_init": torch.export.export(_Init(lora), (), strict=True)}
        with stage(f"executorch: lowering {path.name} ({kernels} kernels; slow for real models)"):
            partitioner = [XnnpackPartitioner()] if kernels == "xnnpack" else []
            program = to_edge_transform_and_lower(methods, partitioner=partitioner,
                                                  compile_config=EdgeCompileConfig(_check_ir_validity=False))
            program = program.to_executorch()
    path.write_bytes(program.buffer)
    return {"window": window, "batch": batch, "lam": lam, "mapped": len(mapped_draft_ids), "update": RULE.to_dict(),
            "kernels": kernels}


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
