"""Export a Hugging Face causal LM to one ONNX graph with an explicit static KV cache.

One graph serves prefill (in chunks), drafting (1 token) and verification
(1..K+1 tokens): the token count is a dynamic dimension. Optional int8 weights
(onnxruntime MatMulNBits, see `quantize_int8_weights` for why not quantize_dynamic).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from ..progress import stage
from .kv_wrapper import HEAD_INPUTS, HEAD_OUTPUTS, StaticKVModel, StaticKVRowsModel, head_example, kv_shape, runner_meta

INPUTS = ["input_ids", "position_ids", "past_keys", "past_values"]
OUTPUTS = ["logits", "present_keys", "present_values"]


def export_onnx(model, path: Path, max_context: int, max_tokens: int, quant: str = "none", head: bool = False,
                max_logit_rows: int | None = None) -> dict:
    """Write `path` (.onnx) and return its metadata; with `head`, the acceptance head too (kv_wrapper.py);
    with `max_logit_rows` (targets), a last input `logit_rows` [k]: the rows whose logits the graph returns."""
    path = Path(path)
    model.config._attn_implementation = "sdpa"
    wrapper = (StaticKVModel if max_logit_rows is None else StaticKVRowsModel)(model.eval(), max_context).eval()
    shape = kv_shape(model.config, max_context)
    n = min(3, max_tokens)
    args = (
        torch.ones((1, n), dtype=torch.long),
        torch.arange(n).unsqueeze(0),
        torch.zeros(shape),
        torch.zeros(shape),
    )
    seq = torch.export.Dim("seq", min=1, max=max_tokens)
    dynamic = {"input_ids": {1: seq}, "position_ids": {1: seq}, "past_keys": None, "past_values": None}
    inputs, outputs = INPUTS, OUTPUTS
    if max_logit_rows is not None:
        args += (torch.arange(n - min(2, max_logit_rows), n),)
        dynamic["logit_rows"] = {0: torch.export.Dim("rows", min=1, max=max_logit_rows)}
        inputs = INPUTS + ["logit_rows"]
    if head:
        args += head_example(model)
        dynamic.update(dict.fromkeys(HEAD_INPUTS))
        inputs, outputs = INPUTS + HEAD_INPUTS, OUTPUTS + HEAD_OUTPUTS
    fp32 = path if quant == "none" else path.with_suffix(".fp32.onnx")
    with stage(f"onnx: exporting {path.name}"), warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            wrapper, args, str(fp32), dynamo=True, dynamic_shapes=dynamic,
            input_names=inputs,
            output_names=outputs, external_data=False, optimize=True, verbose=False,
        )
    if quant == "int8":
        with stage(f"onnx: int8 weight quantization of {path.name}"):
            quantize_int8_weights(fp32, path)
        fp32.unlink()
    elif quant != "none":
        raise ValueError(f"unknown ONNX quantization {quant!r}")
    return {**runner_meta(model, max_context, max_tokens, head, max_logit_rows), "quant": quant}


def quantize_int8_weights(src: Path, dst: Path, block_size: int = 32) -> None:
    """int8 weights in blocks of 32 (MatMulNBits), dequantized to fp32 for the matmul.

    Greedy exactness needs each position's logits to be independent of the other
    tokens in the same call. `quantize_dynamic` breaks that (one activation scale
    per tensor: greedy speculative output differed from target-only on 7 of 9
    real prompts), and so does MatMulNBits' int8-compute mode (accuracy_level 4:
    logits of a 16-token chunk differed from one-by-one by 0.53 on Gemma-3-270M,
    5 of 9 prompts differed). fp32 compute (accuracy_level 0) differs by 3e-5.
    """
    import logging

    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    quantizer = MatMulNBitsQuantizer(onnx.load(str(src)), bits=8, block_size=block_size, is_symmetric=True,
                                     accuracy_level=0)
    quantizer.process()
    quantizer.model.save_model_to_file(str(dst), use_external_data_format=False)
