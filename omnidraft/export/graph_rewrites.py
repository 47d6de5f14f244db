"""Rewrites that keep a decoding graph inside XNNPACK: fewer, larger delegate partitions.

XNNPACK's partitioner leaves some of transformers' operations to ExecuTorch's portable
kernels, and every portable operator between two delegated ones splits the graph: a step
of Gemma-3-270M made 219 delegate calls (benchmarks/et_profile.py). The splitters, per layer:
  - RMSNorm's mean over the last dimension (six norms a layer in Gemma-3): XNNPACK's mean is
    a global average pooling of 4D tensors only. Rewritten: mean(x^2) as a linear layer with
    a constant weight row 1/d (a dot product, XNNPACK's fully connected);
  - reshapes of a call's dynamic length ([1, n, heads * d] -> [1, n, heads, d]): XNNPACK
    reshapes with one inferred dimension, not with a symbolic size. Rewritten by an edge-graph
    pass: the size written with its known dimensions and -1 for the dynamic one (the same shape);
  - RoPE's rotate_half (two slices and a cat of a dynamic-length tensor), kept: the same
    rotation as a linear layer with a constant signed permutation merged the partitions further
    but cost more than it saved (its fp32 GEMM per layer: +2.3% on a 6-layer Gemma-3-shaped
    8da8w step, where the two rewrites above gave -3.1%, 300 interleaved calls).
The rewrites change float rounding, not what a row computes: a k-token call still equals k
one-token calls (every row is the same dot products in the same order).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# module -> (RMSNorm class name, weight applied as (1 + w) (Gemma) or w)
_FAMILIES = {
    "gemma3": ("Gemma3RMSNorm", True),
    "llama": ("LlamaRMSNorm", False),
    "qwen2": ("Qwen2RMSNorm", False),
    "qwen3": ("Qwen3RMSNorm", False),
}


class LinearMeanRMSNorm(torch.nn.Module):
    """An RMSNorm whose mean of squares is a dot product with a constant row (a linear layer)."""

    def __init__(self, norm: torch.nn.Module, plus_one: bool):
        super().__init__()
        dim = norm.weight.shape[-1]
        self.weight = norm.weight
        self.eps = float(getattr(norm, "eps", None) or getattr(norm, "variance_epsilon"))
        self.plus_one = plus_one
        self.register_buffer("mean_row", torch.full((1, dim), 1.0 / dim), persistent=False)

    def forward(self, x):
        mean_sq = _last_dim_linear(x * x, self.mean_row)
        normed = x * torch.rsqrt(mean_sq + self.eps)
        return normed * (1.0 + self.weight) if self.plus_one else self.weight * normed


def _last_dim_linear(x, weight):
    """F.linear over the last dimension of x of any rank, as a 2D linear (XNNPACK's fully connected)."""
    out = F.linear(x.reshape(-1, x.shape[-1]), weight)
    return out.reshape(*x.shape[:-1], weight.shape[0])


def _family(model) -> str | None:
    kind = model.config.get_text_config().model_type
    kind = kind.removesuffix("_text")
    return kind if kind in _FAMILIES else None


def replace_norms(model) -> int:
    """Swap the model's RMSNorms for LinearMeanRMSNorm in place; how many were swapped."""
    family = _family(model)
    if family is None:
        return 0
    name, plus_one = _FAMILIES[family]
    swapped = 0
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if type(child).__name__ == name:
                setattr(parent, child_name, LinearMeanRMSNorm(child, plus_one))
                swapped += 1
    return swapped


def infer_dynamic_reshapes(gm):
    """An edge-graph pass: a view_copy whose output has one symbolic dimension gets its size written with the
    known dimensions and -1 there (inferred from the input's size: the same shape), which XNNPACK's reshape
    takes; with a symbolic size (or two -1) the partitioner leaves the view to a portable kernel and splits
    the graph around it."""
    from executorch.exir.dialects._ops import ops as exir_ops
    from torch.fx.passes.infra.pass_base import PassResult

    changed = False
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target != exir_ops.edge.aten.view_copy.default:
            continue
        shape = node.meta["val"].shape  # the output's shape: ints where they are known
        size = [d if isinstance(d, int) else -1 for d in shape]
        if size.count(-1) == 1 and list(node.args[1]) != size:
            node.args = (node.args[0], size, *node.args[2:])
            changed = True
    if changed:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return PassResult(gm, changed)

