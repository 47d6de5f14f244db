"""Backend benchmark: eager fp32 vs exported bundles (ExecuTorch, onnxruntime, quantized).

For each configuration, in one process with a fixed thread count:
  - graph file sizes;
  - median per-call latency of the target at k = 1, 4, 8 tokens and of the drafter
    step, after a 64-token prefill, and the cost ratio c = drafter step / target step;
  - fidelity against eager fp32 on real text (teacher-forced, chunks of 8): top-1
    agreement and the largest logit difference, absolute and relative to the
    logit range;
  - end-to-end greedy tokens/s, speculative vs target-only on the same backend,
    side by side per prompt, and whether the outputs are identical.

    .venv/bin/python benchmarks/backends.py --bundle DIR[:backend] ... --out benchmarks/results/backends
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from omnidraft import corpora
from omnidraft.bundle import load_bundle
from omnidraft.pair import build_bundle_pair, build_eager_pair
from omnidraft.runtime.decoding import GenerationConfig, SpeculativeDecoder

sys.path.insert(0, str(Path(__file__).parent))
from common import save_results, step_ms  # noqa: E402


def teacher_forced_logits(runner, ids, chunk=8):
    runner.reset()
    rows = [runner.forward(ids[i : i + chunk], i, len(ids[i : i + chunk])) for i in range(0, len(ids), chunk)]
    return np.concatenate(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", action="append", default=[], help="DIR or DIR:backend (default both backends found)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--prompts-per-domain", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--draft-len", type=int, default=4)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import transformers

    transformers.utils.logging.disable_progress_bar()

    configs = [("eager fp32", lambda spec: build_eager_pair(speculative=spec, use_ngram_cache=False), {})]
    for item in args.bundle:
        path, _, backend = item.partition(":")
        manifest = load_bundle(path, verify_hashes=False).manifest
        fmts = manifest.models["target"].graphs
        backends = [backend] if backend else [b for b, f in (("executorch", "executorch"), ("onnxruntime", "onnx")) if f in fmts]
        for b in backends:
            ext = "pte" if b == "executorch" else "onnx"
            sizes = {role: (Path(path) / f"{role}.{ext}").stat().st_size for role in ("target", "drafter")}
            quant = manifest.quant if manifest.quant != "none" else "fp32"
            if manifest.embedding_quant != "none":
                quant += f", {manifest.embedding_quant} embeddings"
            label = f"{b} {quant} ({Path(path).name})"
            configs.append((label, lambda spec, p=path, b=b: build_bundle_pair(p, b, speculative=spec, threads=args.threads,
                                                                                  use_ngram_cache=False), sizes))

    text_ids = None
    reference = None
    prompts = [(d, t) for d in corpora.DOMAINS for t in corpora.prompts(d, args.prompts_per_domain, seed=1, split="eval")]
    rows = []
    for label, build, sizes in configs:
        print(f"== {label}", file=sys.stderr, flush=True)
        pair = build(True)
        dec = pair.decoder
        if text_ids is None:
            sample = corpora.prompts("prose", 1, seed=5)[0] + corpora.prompts("code", 1, seed=5)[0]
            text_ids = pair.encode_prompt(sample)[:96]
        prefix = text_ids[:64]
        lat = {k: step_ms(dec.target, prefix, k, args.reps) for k in (1, 4, 8)}
        draft_prefix = pair.bridge.draft_prompt(prefix)[:64]
        lat_d = step_ms(pair.drafter, draft_prefix, 1, args.reps)
        logits = teacher_forced_logits(dec.target, text_ids)
        if reference is None:
            reference = logits
        diff = np.abs(logits - reference)
        agree = float((logits.argmax(-1) == reference.argmax(-1)).mean())
        spec_tokens = base_tokens = 0
        spec_s = base_s = 0.0
        identical = 0
        calls = 0
        for domain, text in prompts:
            chat = domain == "chat"
            ids = pair.encode_prompt(text, chat=chat)
            eos = pair.eos_ids(chat)
            base = SpeculativeDecoder(dec.target, pair.target_vocab).generate(
                ids, GenerationConfig(args.max_new_tokens, speculative=False, eos_ids=eos))
            spec = dec.generate(ids, GenerationConfig(args.max_new_tokens, draft_len=args.draft_len, eos_ids=eos))
            identical += spec.token_ids == base.token_ids
            spec_tokens += spec.stats.new_tokens
            spec_s += spec.stats.decode_s
            base_tokens += base.stats.new_tokens
            base_s += base.stats.decode_s
            calls += spec.stats.target_calls
        row = {
            "config": label,
            "target_mb": sizes.get("target", 0) / 2**20,
            "drafter_mb": sizes.get("drafter", 0) / 2**20,
            "target_ms_k1": lat[1], "target_ms_k4": lat[4], "target_ms_k8": lat[8],
            "drafter_ms": lat_d, "c": lat_d / lat[1],
            "top1_agreement": agree, "max_abs_logit_diff": float(diff.max()),
            "max_rel_logit_diff": float(diff.max() / (reference.max() - reference.min())),
            "tokens_per_target_call": spec_tokens / calls,
            "spec_tokens_per_s": spec_tokens / spec_s, "target_only_tokens_per_s": base_tokens / base_s,
            "speedup": (spec_tokens / spec_s) / (base_tokens / base_s),
            "identical_outputs": f"{identical}/{len(prompts)}",
        }
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
        del pair, dec
    result = {"command": " ".join(["benchmarks/backends.py", *sys.argv[1:]]), "threads": args.threads,
              "date": time.strftime("%Y-%m-%d"), "draft_len": args.draft_len, "max_new_tokens": args.max_new_tokens,
              "prompts": len(prompts), "rows": rows}
    save_results(args.out, result, render)
    return 0


def render(r: dict) -> str:
    lines = [
        f"{r['threads']} threads, greedy, draft length {r['draft_len']}, {r['prompts']} prompts x {r['max_new_tokens']} "
        f"new tokens (code, prose, chat), {r['date']}. Latencies are medians in ms after a 64-token prefill; "
        "fidelity is against eager fp32 on 96 tokens of real text.",
        "",
        "| config | target MB | drafter MB | target k=1 | k=4 | k=8 | drafter step | c | top-1 agree | max abs diff (rel) | tok/call | spec tok/s | target-only tok/s | speedup | identical |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for x in r["rows"]:
        lines.append(
            f"| {x['config']} | {x['target_mb']:.0f} | {x['drafter_mb']:.0f} | {x['target_ms_k1']:.1f} | {x['target_ms_k4']:.1f} | "
            f"{x['target_ms_k8']:.1f} | {x['drafter_ms']:.1f} | {x['c']:.2f} | {x['top1_agreement']:.3f} | "
            f"{x['max_abs_logit_diff']:.3g} ({x['max_rel_logit_diff']:.1e}) | {x['tokens_per_target_call']:.2f} | "
            f"{x['spec_tokens_per_s']:.2f} | {x['target_only_tokens_per_s']:.2f} | {x['speedup']:.2f}x | {x['identical_outputs']} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
