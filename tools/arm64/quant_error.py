"""The size of the int8 error itself: eager 8da8w (torchao, as the export quantizes) against eager fp32.

    .venv/bin/python tools/arm64/quant_error.py

Same text and positions as check.py's logits (the prompts' first 64 tokens), default pair.
The arm64-against-x86 difference of an 8da8w program is read against this: two int8
approximations of the same fp32 model differ from each other about as much as each
differs from fp32 (benchmarks/RESULTS.md, "arm64 under emulation").
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from check import PROMPTS, TEXT_TOKENS  # noqa: E402


def main() -> int:
    from omnidraft.export.executorch_export import quantize_linears
    from omnidraft.models import DEFAULT_DRAFTER, DEFAULT_TARGET, load_model, load_tokenizer
    from omnidraft.catalog import resolve_model_path

    torch.set_num_threads(2)
    print("| program | max abs difference | mean abs difference | largest logit | top-1 same |")
    print("|---|---|---|---|---|")
    for role, default in (("target", DEFAULT_TARGET), ("drafter", DEFAULT_DRAFTER)):
        path = resolve_model_path(None, default)
        ids = torch.tensor([load_tokenizer(path).encode("".join(PROMPTS))[:TEXT_TOKENS]])
        fp32 = load_model(path)
        int8 = copy.deepcopy(fp32)
        quantize_linears(int8, "8da8w")
        with torch.no_grad():
            a, b = fp32(ids).logits[0].numpy(), int8(ids).logits[0].numpy()
        d = np.abs(a - b)
        print(f"| {role} | {d.max():.3g} | {d.mean():.3g} | {np.abs(a).max():.3g} | "
              f"{int((a.argmax(-1) == b.argmax(-1)).sum())} of {len(a)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
