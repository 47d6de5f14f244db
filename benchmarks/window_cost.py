"""What a long window costs a decode step: the default bundle at a deep fill, a 512-position bundle on a
short prompt, and llama.cpp at the same depth, alternated round by round.

    .venv/bin/python benchmarks/window_cost.py --bundle ~/.cache/omnidraft/bundles/et-8da8w-d8da4w \\
        --short-bundle ~/.cache/omnidraft/bundles/et-512-e8 --fill 3000 --rounds 6 --threads 2 \\
        --out benchmarks/results/window_cost

Each round decodes 64 tokens target-only, greedy, on each bundle (its prompt read once before the rounds
and reused, so a round times decoding only) and runs `llama-bench -n 64 -d FILL -r 1` (the same target at
Q8_0). One 64-token run on this machine varies by 5-10% from one moment to the next; alternating the
three and taking medians over the rounds is what makes the ratios comparable. The short bundle must be
the same target exported with `--max-context 512` and otherwise the same options (int8 embedding tables).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from omnidraft.pair import PairOptions, open_pair
from omnidraft.runtime.choices import Backend
from omnidraft.runtime.decoding import GenerationConfig

sys.path.insert(0, str(Path(__file__).parent))
from common import save_results  # noqa: E402
from llama_cpp_peer import llama_cpp, q8_target  # noqa: E402
from long_context import long_prompts  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, required=True, help="the default ExecuTorch bundle (a long window)")
    ap.add_argument("--short-bundle", type=Path, required=True, help="the same target exported with a 512 window")
    ap.add_argument("--fill", type=int, default=3000)
    ap.add_argument("--short-fill", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-llama-cpp", action="store_true")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if min(args.rounds, args.threads, args.fill, args.short_fill) < 1:
        ap.error("--rounds, --threads, --fill and --short-fill must be at least 1")
    torch.set_num_threads(args.threads)
    peer = None if args.no_llama_cpp else llama_cpp()
    model = q8_target(peer) if peer else None
    pairs = {name: open_pair(PairOptions(backend=Backend.EXECUTORCH, bundle=b, speculative=False, threads=args.threads))
             for name, b in (("long", args.bundle), ("short", args.short_bundle))}
    tokenizer = pairs["long"].target_vocab.tokenizer
    prompts = {"long": long_prompts(tokenizer, args.fill)["code"], "short": long_prompts(tokenizer, args.short_fill)["code"]}
    if len(prompts["long"]) + 65 > pairs["long"].decoder.target.max_context:
        ap.error(f"--fill {args.fill} leaves no room for 64 new tokens in the bundle's window")
    config = GenerationConfig(max_new_tokens=64, eos_ids=frozenset())
    for name, pair in pairs.items():  # read each prompt once (and warm up); the rounds reuse it
        pair.decoder.generate(prompts[name], config)
    labels = {"long": f"ours, {args.bundle.name}, fill {len(prompts['long'])}",
              "short": f"ours, {args.short_bundle.name}, fill {len(prompts['short'])}",
              "llama": f"llama.cpp Q8_0, depth {args.fill}"}
    runs = {k: [] for k in labels if k != "llama" or peer}
    for i in range(args.rounds):
        for name, pair in pairs.items():
            runs[name].append(pair.decoder.generate(prompts[name], config).stats.tokens_per_s)
        if peer:
            cmd = [str(peer / "bin" / "llama-bench"), "-m", str(model), "-t", str(args.threads), "-p", "0", "-n", "64",
                   "-d", str(args.fill), "-r", "1", "-o", "json"]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
            if done.returncode != 0:
                raise SystemExit(f"llama-bench failed: {done.stderr[-300:]}")
            runs["llama"].append(json.loads(done.stdout)[0]["avg_ts"])
        print(f"[window] round {i + 1}/{args.rounds}: " + ", ".join(f"{labels[k]} {v[-1]:.1f}" for k, v in runs.items()),
              file=sys.stderr)
    medians = {k: statistics.median(v) for k, v in runs.items()}
    result = {"date": time.strftime("%Y-%m-%d"), "threads": args.threads, "rounds": args.rounds,
              "rows": [{"what": labels[k], "median_tokens_per_s": medians[k], "runs": runs[k],
                        "vs_short": medians[k] / medians["short"],
                        "vs_llama_cpp": medians[k] / medians["llama"] if "llama" in medians else None}
                       for k in runs],
              "command": "benchmarks/window_cost.py " + " ".join(sys.argv[1:])}
    save_results(args.out, result, render)
    return 0


def render(r: dict) -> str:
    lines = [f"Target-only decoding, 64 tokens, greedy, {r['threads']} threads, {r['rounds']} alternated rounds, "
             f"{r['date']}. Command: `{r['command']}`.", "",
             "| what | median tok/s | rounds | vs the 512 bundle on a short prompt | vs llama.cpp at the depth |",
             "|---|---|---|---|---|"]
    for row in r["rows"]:
        vs_llama = "" if row["vs_llama_cpp"] is None else f"{row['vs_llama_cpp']:.2f}x"
        lines.append(f"| {row['what']} | {row['median_tokens_per_s']:.1f} | "
                     f"{', '.join(f'{x:.1f}' for x in row['runs'])} | {row['vs_short']:.2f}x | {vs_llama} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
