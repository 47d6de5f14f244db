"""What sampling costs target-only decoding: greedy against temperature/top-p, side by side, per backend.

    .venv/bin/python benchmarks/sampling_speed.py --bundle ~/.cache/omnidraft/bundles/et-8da8w-d8da4w \\
        --threads 2 --out benchmarks/results/sampling_speed

Per backend (eager PyTorch with the default target, and the bundle's ExecuTorch target), the same open-ended
prompts decoded target-only greedy and at each --temperature (top-p --top-p, a seed per prompt), interleaved
prompt by prompt, 64 new tokens, threads fixed. Also the sampler alone: milliseconds to turn one row of
the target's logits into its distribution and draw a token (omnidraft/runtime/sampling.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from omnidraft import corpora
from omnidraft.pair import PairOptions, open_pair
from omnidraft.runtime.choices import Backend
from omnidraft.runtime.decoding import GenerationConfig
from omnidraft.runtime.sampling import Sampler, position_uniform

sys.path.insert(0, str(Path(__file__).parent))
from common import save_results  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, help="an ExecuTorch bundle (its target); without it, eager only")
    ap.add_argument("--no-eager", action="store_true")
    ap.add_argument("--temperature", default="0.8", help="comma-separated temperatures")
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--prompts", type=int, default=4, help="per domain (code, prose, chat)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    temperatures = [float(t) for t in args.temperature.split(",")]
    if min(temperatures) <= 0 or not 0 < args.top_p <= 1 or args.prompts < 1 or args.threads < 1:
        ap.error("temperatures > 0, --top-p in (0, 1], --prompts and --threads at least 1")
    torch.set_num_threads(args.threads)
    systems = []
    if not args.no_eager:
        systems.append(("eager", PairOptions(speculative=False, threads=args.threads)))
    if args.bundle:
        systems.append(("executorch", PairOptions(backend=Backend.EXECUTORCH, bundle=args.bundle, speculative=False,
                                                  threads=args.threads)))
    prompts = [p for d in corpora.DOMAINS for p in corpora.prompts(d, args.prompts, seed=13)]
    rows, sampler_ms = [], None
    for label, options in systems:
        pair = open_pair(options)
        settings = [("greedy", Sampler())] + [(f"T {t}, top-p {args.top_p}", Sampler(t, args.top_p))
                                              for t in temperatures]
        tps = {name: [] for name, _ in settings}
        for i, text in enumerate(prompts):
            ids = pair.encode_prompt(text)
            for name, sampler in settings:
                config = GenerationConfig(max_new_tokens=args.max_new_tokens, sampler=sampler, seed=i + 1,
                                          eos_ids=frozenset(), speculative=False)
                tps[name].append(pair.decoder.generate(ids, config).stats.tokens_per_s)
            print(f"[sampling] {label} prompt {i + 1}/{len(prompts)}: "
                  + ", ".join(f"{k} {v[-1]:.1f}" for k, v in tps.items()), file=sys.stderr)
        for name, values in tps.items():
            ratios = [a / b for a, b in zip(values, tps["greedy"])]
            rows.append({"backend": label, "setting": name, "tokens_per_s": statistics.median(values),
                         "vs_greedy": statistics.median(ratios), "worst_vs_greedy": min(ratios)})
        if sampler_ms is None:  # the sampler alone, on this target's real logits
            ids = pair.encode_prompt(prompts[0])
            pair.decoder.target.reset()
            logits = pair.decoder.target.forward(ids, 0, min(9, len(ids)))
            s = Sampler(temperatures[0], args.top_p)
            times = []
            for rep in range(20):
                t0 = time.perf_counter()
                for j, row in enumerate(logits):
                    s.dist(row).draw(position_uniform(rep, j))
                times.append((time.perf_counter() - t0) / len(logits))
            sampler_ms = {"ms_per_row": 1000 * statistics.median(times), "vocab": int(logits.shape[-1]),
                          "support_median": int(np.median([len(s.dist(row).ids) for row in logits]))}
        del pair
    result = {"date": time.strftime("%Y-%m-%d"), "threads": args.threads, "prompts": len(prompts),
              "max_new_tokens": args.max_new_tokens, "top_p": args.top_p, "sampler": sampler_ms,
              "command": "benchmarks/sampling_speed.py " + " ".join(sys.argv[1:]), "rows": rows}
    save_results(args.out, result, render)
    return 0


def render(r: dict) -> str:
    s = r["sampler"]
    lines = [f"Target-only decoding, greedy against sampling, {r['prompts']} open-ended prompts, {r['max_new_tokens']} "
             f"new tokens, {r['threads']} threads, {r['date']}; medians of tokens per second and of per-prompt ratios. "
             f"The sampler alone: {s['ms_per_row']:.2f} ms per row of {s['vocab']:,} logits (median support "
             f"{s['support_median']} tokens). Command: `{r['command']}`.", "",
             "| backend | setting | tok/s | vs greedy | worst prompt |", "|---|---|---|---|---|"]
    for row in r["rows"]:
        lines.append(f"| {row['backend']} | {row['setting']} | {row['tokens_per_s']:.1f} | {row['vs_greedy']:.2f}x | "
                     f"{row['worst_vs_greedy']:.2f}x |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
