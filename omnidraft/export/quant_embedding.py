"""Weight-only quantized embedding tables for ExecuTorch programs (int8 or int4, groups of 32).

The table is quantized symmetrically per group of 32 columns with torchao's affine
primitives and looked up with ExecuTorch's quantized embedding operators
(`quantized_decomposed::embedding_byte` / `embedding_4bit`, whose kernels ship in the
executorch wheel and the Android AAR), as ExecuTorch's llama export does. int4 values
are packed two per byte (high nibble first), the layout those kernels read.

A tied output head keeps its own copy: XNNPACK packs the head's weights in its own
format, so the table and the head cannot share one buffer. Quantizing the table is what
shrinks it (Gemma-3's 262,144 x 640 table: 671 MB as fp32, 168 MB as int8, 84 MB as int4).
"""

from __future__ import annotations

import torch

GROUP = 32
RANGES = {"int8": (-128, 127), "int4": (-8, 7)}


class QuantizedEmbedding(torch.nn.Module):
    """Drop-in for an nn.Embedding (and Gemma's scaled variant): same ids in, float32 rows out."""

    def __init__(self, embedding: torch.nn.Embedding, bits: str):
        import executorch.exir.passes._quant_patterns_and_replacements  # noqa: F401 - registers quantized_decomposed
        from torchao.quantization.quant_primitives import MappingType, choose_qparams_affine, quantize_affine

        super().__init__()
        weight = embedding.weight.detach().float()
        rows, dim = weight.shape
        if dim % GROUP:
            raise ValueError(f"embedding width {dim} is not a multiple of {GROUP}")
        self.bits = bits
        self.qmin, self.qmax = RANGES[bits]
        block = [1, GROUP]
        scale, zero = choose_qparams_affine(weight, MappingType.SYMMETRIC, block, torch.int8, self.qmin, self.qmax)
        q = quantize_affine(weight, block, scale, zero, torch.int8, self.qmin, self.qmax)
        if bits == "int4":
            nibbles = (q + 8).to(torch.uint8).view(rows, dim // 2, 2)
            q = (nibbles[:, :, 0] << 4) | nibbles[:, :, 1]
        self.register_buffer("weight", q.contiguous())
        self.register_buffer("scales", scale.reshape(rows, dim // GROUP).float().contiguous())
        scale_out = getattr(embedding, "embed_scale", None)  # Gemma multiplies the rows by sqrt(hidden)
        self.register_buffer("embed_scale", None if scale_out is None else torch.as_tensor(scale_out, dtype=torch.float32))

    def forward(self, ids):
        op = torch.ops.quantized_decomposed.embedding_4bit if self.bits == "int4" else \
            torch.ops.quantized_decomposed.embedding_byte
        rows = op.dtype(self.weight, self.scales, None, self.qmin, self.qmax, ids, dtype=torch.float32)
        return rows if self.embed_scale is None else rows * self.embed_scale


def quantize_embeddings(model, bits: str) -> None:
    """Replace the model's input embedding table by a quantized one (in place)."""
    model.set_input_embeddings(QuantizedEmbedding(model.get_input_embeddings(), bits))
