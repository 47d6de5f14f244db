"""Eager target call time against the number of tokens in the call: what a verification costs.

Two ways to apply the output projection, same model, same KV cache, side by side:
  - runner: omnidraft's EagerRunner (a plain projection applied as W @ h^T);
  - h @ W^T: the Hugging Face forward's own lm_head (what the runner did before 2026-12-06).
Median ms of one n-token call after a prose prefix of up to 64 tokens (rolled back before each repetition).

    .venv/bin/python benchmarks/eager_calls.py --out benchmarks/results/eager_calls --threads 2
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from omnidraft import corpora
from omnidraft.models import DEFAULT_TARGET, load_model, load_tokenizer
from omnidraft.catalog import resolve_model_path
from omnidraft.runtime.runner import EagerRunner

sys.path.insert(0, str(Path(__file__).parent))
from common import save_results, step_ms  # noqa: E402

SIZES = (1, 2, 3, 5, 9)


class HFHeadRunner(EagerRunner):
    """The runner with the Hugging Face forward's own output projection (h @ W^T), for comparison."""

    def _plain_head(self):
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    path = resolve_model_path(None, DEFAULT_TARGET)
    model = load_model(path)
    prefix = load_tokenizer(path).encode(corpora.prompts("prose", 1, seed=3)[0])[:64]
    runners = {"runner (W @ h^T)": EagerRunner(model, 512, "target"), "h @ W^T": HFHeadRunner(model, 512, "target")}
    rows = {name: {} for name in runners}
    for n in SIZES:  # the two ways in turns, so that a load drift hits both
        for name, runner in runners.items():
            rows[name][n] = step_ms(runner, prefix, n, args.reps)
        print(f"{n} tokens: " + ", ".join(f"{name} {rows[name][n]:.1f} ms" for name in runners), flush=True)
    result = {"command": "benchmarks/eager_calls.py " + " ".join(sys.argv[1:]), "threads": args.threads,
              "date": time.strftime("%Y-%m-%d"), "target": path.name, "prefix_tokens": len(prefix),
              "ms": {name: {str(n): v for n, v in r.items()} for name, r in rows.items()}}
    save_results(args.out, result, render)


def render(r: dict) -> str:
    sizes = list(next(iter(r["ms"].values())))
    lines = [f"Eager {r['target']} call time (median ms) by tokens per call after a {r['prefix_tokens']}-token "
             f"prefix, {r['threads']} threads, {r['date']}. Command: `{r['command']}`.", "",
             "| output projection | " + " | ".join(f"{n} tokens" for n in sizes) + " |",
             "|---|" + "---|" * len(sizes)]
    for name, ms in r["ms"].items():
        lines.append(f"| {name} | " + " | ".join(f"{ms[n]:.1f}" for n in sizes) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
