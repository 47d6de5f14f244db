"""Export a Hugging Face causal LM to an ExecuTorch program (.pte) delegated to XNNPACK.

One method, `forward(input_ids [1, n], position_ids [1, n]) -> logits [1, n, vocab]`,
1 <= n <= max_tokens (a target's also takes logit_rows [k] and returns logits [1, k, vocab]
for those rows of the call only); the static KV cache is a mutable buffer inside the program
and persists across calls, written and read by ExecuTorch's LLM custom ops (llama_ops.py). `8da4w` quantizes linear weights to int4 (groups of 32),
`8da8w` to int8 (per channel), both with dynamic per-token int8 activations,
through torchao before lowering.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from ..progress import log, stage
from .kv_wrapper import HEAD_INPUTS, BufferKVModel, head_example, runner_meta
from .quant_embedding import quantize_embeddings


def quantize_linears(model, quant: str, group_size: int = 32) -> None:
    """Dynamic per-token int8 activations with int4 (groups of 32) or int8 (per channel) weights.

    Per-token activation scales keep each position independent of the others in
    a call, so verifying k tokens at once equals decoding them one by one.
    Gemma-3-270M (itself converted from a Q4_K_M GGUF) loses top-1 agreement
    under int4 weights; int8 weights keep it (docs/usage.md, "Export and run on-device graphs").
    """
    from torchao.quantization import quantize_
    from torchao.quantization.granularity import PerAxis, PerGroup
    from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig

    if quant == "8da4w":
        config = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(group_size))
    else:
        config = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0))
    quantize_(model, config)


def export_executorch(model, path: Path, max_context: int, max_tokens: int, quant: str = "none",
                      head: bool = False, exact_rows: bool = True, embedding_quant: str = "none",
                      max_logit_rows: int | None = None) -> dict:
    """Write `path` (.pte); with `head`, the graph also computes the acceptance head (kv_wrapper.py).

    The KV cache is written in place by ExecuTorch's LLM custom ops (llama_ops.py), so the
    program needs their kernels at run time (`executorch_ops` ["llama"]). `exact_rows` (the
    target's graph) makes a k-token call equal k one-token calls bit for bit; without it
    (drafters) attention is ExecuTorch's custom SDPA, faster on long caches. A program with
    `embedding_quant` int8 or int4 also needs ExecuTorch's quantized kernels (["quantized"],
    quant_embedding.py). `max_logit_rows` (targets): the graph takes the rows whose logits it
    returns as a third input, at most that many (a prefill chunk of max_tokens asks for one).
    """
    path = Path(path)
    model.config._attn_implementation = "sdpa"
    ops = ["llama"]
    if embedding_quant != "none":  # first: a tied head keeps the float table, quantized below as a linear
        with stage(f"executorch: {embedding_quant} embedding table for {path.name}"):
            quantize_embeddings(model, embedding_quant)
        ops.append("quantized")
    if quant in ("8da4w", "8da8w"):
        with stage(f"executorch: {quant} quantization for {path.name}"):
            quantize_linears(model, quant)
    elif quant != "none":
        raise ValueError(f"unknown ExecuTorch quantization {quant!r}")
    n = min(3, max_tokens)
    example = (torch.ones((1, n), dtype=torch.long), torch.arange(n).unsqueeze(0))
    seq = torch.export.Dim("seq", min=1, max=max_tokens)
    extra = []  # the dynamic shapes of the inputs after the positions (the wrapper's *extra)
    if max_logit_rows is not None:
        example += (torch.arange(n - min(2, max_logit_rows), n),)
        extra.append({0: torch.export.Dim("rows", min=1, max=max_logit_rows)})
    if head:
        example += head_example(model)  # an eager call: before the wrapper switches the model's attention
        extra += [None] * len(HEAD_INPUTS)
    wrapper = BufferKVModel(model.eval(), max_context, exact_rows, max_tokens, max_logit_rows is not None).eval()
    lower_to_xnnpack(wrapper, example, ({1: seq}, {1: seq}, *([tuple(extra)] if extra else [])), path, strict=True)
    return {**runner_meta(model, max_context, max_tokens, head, max_logit_rows, wrapper.lengths), "quant": quant,
            "executorch_ops": ops}


def lower_to_xnnpack(wrapper, example: tuple, dynamic_shapes, path: Path, strict: bool) -> None:
    """torch.export, XNNPACK lowering and writing of one decoding program, each a progress stage; logs the number
    of XNNPACK partitions (delegate calls per run of the graph)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        with stage(f"executorch: torch.export of {path.name}"):
            ep = torch.export.export(wrapper, example, dynamic_shapes=dynamic_shapes, strict=strict)
        with stage(f"executorch: lowering {path.name} to XNNPACK (slow for real models)"):
            edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
            program = edge.to_executorch()
    partitions = sum(1 for node in edge.exported_program().graph.nodes
                     if node.op == "call_function" and "call_delegate" in str(node.target))
    log(f"[omnidraft] executorch: {path.name} runs {partitions} XNNPACK partitions per call")
    with stage(f"executorch: writing {path.name}"):
        path.write_bytes(program.buffer)
