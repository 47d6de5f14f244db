"""What a smaller KV cache element costs the target's greedy agreement: fp16 and int8 keys and values.

    .venv/bin/python benchmarks/kv_precision.py --prompts 4 --new-tokens 96 --threads 2 \\
        --out benchmarks/results/kv_precision

The eager fp32 target continues each prompt greedily (the reference). Then, teacher-forced on the prompt and
that continuation, the same model runs with every key and value rounded as a cache of a smaller element
would store them (what attention reads back): fp16 (round to half precision), bf16, and int8 with one
absmax scale per token and KV head (symmetric, as a per-token quantized cache). Reported per setting: the
top-1 agreement with the reference continuation (the unrounded row shows what teacher forcing alone moves),
and over the prompt and continuation the largest
difference of the logits relative to their spread. Only the global layers' cache would change in the
exact-rows graph; here every layer's is rounded, so the figures bound that choice from below.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

from omnidraft import corpora
from omnidraft.catalog import resolve_model_path
from omnidraft.models import DEFAULT_TARGET, load_model, load_tokenizer

sys.path.insert(0, str(Path(__file__).parent))
from common import save_results  # noqa: E402


def round_fp(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return x.to(dtype).to(x.dtype)


def round_int8(x: torch.Tensor) -> torch.Tensor:
    """[batch, kv_heads, seq, dim]: one absmax scale per (token, KV head), values in -127..127."""
    scale = x.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12) / 127.0
    return torch.round(x / scale).clamp(-127, 127) * scale


SETTINGS = {"fp32 (the measurement's floor: teacher-forced, not rounded)": lambda x: x,
            "fp16": lambda x: round_fp(x, torch.float16), "bf16": lambda x: round_fp(x, torch.bfloat16),
            "int8 per token and head": round_int8}


class _Rounding:
    """While active, the cache layers store (and attention reads) keys and values rounded by `fn`."""

    def __init__(self, fn):
        self.fn = fn
        self.saved = {}

    def __enter__(self):
        for cls in (DynamicLayer, DynamicSlidingWindowLayer):
            original = cls.update
            self.saved[cls] = original

            def update(layer, key_states, value_states, *args, _original=original, **kwargs):
                return _original(layer, self.fn(key_states), self.fn(value_states), *args, **kwargs)

            cls.update = update
        return self

    def __exit__(self, *exc):
        for cls, original in self.saved.items():
            cls.update = original


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=4, help="per domain (code, prose, chat)")
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if min(args.prompts, args.new_tokens, args.threads) < 1:
        ap.error("--prompts, --new-tokens and --threads must be at least 1")
    torch.set_num_threads(args.threads)
    path = resolve_model_path(None, DEFAULT_TARGET)
    tokenizer, model = load_tokenizer(path), load_model(path).eval()
    texts = [t for d in corpora.DOMAINS for t in corpora.prompts(d, args.prompts, seed=3)]
    agree = {name: [0, 0] for name in SETTINGS}
    spread = {name: 0.0 for name in SETTINGS}
    t0 = time.perf_counter()
    for i, text in enumerate(texts):
        ids = tokenizer(text, return_tensors="pt").input_ids
        with torch.no_grad():
            full = model.generate(ids, max_new_tokens=args.new_tokens, do_sample=False, min_new_tokens=args.new_tokens)
            n = ids.shape[1]
            reference = model(full, past_key_values=DynamicCache()).logits[0]
            for name, fn in SETTINGS.items():
                with _Rounding(fn):
                    logits = model(full, past_key_values=DynamicCache()).logits[0]
                picked = logits[n - 1 : -1].argmax(-1)
                agree[name][0] += int((picked == full[0, n:]).sum())
                agree[name][1] += len(picked)
                rel = ((logits - reference).abs().amax(-1) / reference.std(-1)).max().item()
                spread[name] = max(spread[name], rel)
        print(f"[kv] prompt {i + 1}/{len(texts)}: " + ", ".join(f"{k} {a / b:.3f}" for k, (a, b) in agree.items()),
              file=sys.stderr)
    result = {"date": time.strftime("%Y-%m-%d"), "threads": args.threads, "prompts": len(texts),
              "new_tokens": args.new_tokens, "seconds": time.perf_counter() - t0,
              "rows": [{"setting": k, "agreement": a / b, "positions": b, "max_logit_diff_over_std": spread[k]}
                       for k, (a, b) in agree.items()],
              "command": "benchmarks/kv_precision.py " + " ".join(sys.argv[1:])}
    save_results(args.out, result, render)
    return 0


def render(r: dict) -> str:
    lines = [f"Eager fp32 Gemma-3-270M, {r['prompts']} prompts (code, prose, chat), {r['new_tokens']} greedy tokens "
             f"each, teacher-forced with every layer's keys and values rounded, {r['date']}. Command: "
             f"`{r['command']}`.", "",
             "| cache element | top-1 agreement with fp32 | positions | largest logit difference / logit std |",
             "|---|---|---|---|"]
    for row in r["rows"]:
        lines.append(f"| {row['setting']} | {row['agreement']:.4f} | {row['positions']} | "
                     f"{row['max_logit_diff_over_std']:.3f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
