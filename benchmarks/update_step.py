"""One adaptation update step on the real drafter: eager vs the exported ExecuTorch program, side by side.

Both learners take the same clipped-Adam steps (omnidraft/adaptation/update_rule.py) on the
same batch of `--batch` windows of `--window` draft tokens (random tokens, 80% KL rows over
`--mapped` target logits, the rest n-gram rows). Each learner runs in its own fresh process
(its peak RSS is its memory: the drafter, the program, activations, optimizer state); steps
are timed after one warm-up step. The ExecuTorch program is exported once into `--cache`.

    .venv/bin/python benchmarks/update_step.py --threads 2 --steps 3
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import sys
import time
from pathlib import Path

import numpy as np


def batch(window: int, size: int, n_mapped: int, seed: int = 0):
    from omnidraft.adaptation.examples import Example

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(size):
        kl = np.arange(window - 1)[rng.random(window - 1) < 0.8]
        nll = np.setdiff1d(np.arange(window - 1), kl)
        out.append(Example(rng.integers(0, 49152, window), kl,
                           rng.standard_normal((len(kl), n_mapped)).astype(np.float16), nll))
    return out


def run(kind: str, args, queue) -> None:
    import torch

    from omnidraft.adaptation.examples import Mapping
    from omnidraft.adaptation.learners import EagerLearner, ExecuTorchLearner
    from omnidraft.adaptation.lora import LoRAConfig
    from omnidraft.adaptation.online import AdaptConfig
    from omnidraft.models import DEFAULT_DRAFTER, load_model
    from omnidraft.catalog import resolve_model_path

    torch.set_num_threads(args.threads)
    examples = batch(args.window, args.batch, args.mapped)
    config = AdaptConfig(lora=LoRAConfig(rank=args.rank), window=args.window, batch=args.batch)
    if kind == "eager":
        model = load_model(resolve_model_path(None, DEFAULT_DRAFTER))
        learner = EagerLearner(model, config, Mapping(np.arange(args.mapped), np.arange(args.mapped)))
    else:
        names = json.loads((args.cache / "names.json").read_text())
        learner = ExecuTorchLearner(args.cache / "drafter_train.pte", names, args.window, args.batch, args.mapped,
                                    config.lr)
    times, losses = [], []
    for i in range(args.steps + 1):
        start = time.perf_counter()
        losses.append(learner.step(examples)[0])
        if i:
            times.append(time.perf_counter() - start)
    queue.put({"learner": kind, "step_s": times, "losses": losses,
               "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})


def export(args) -> None:
    from omnidraft.adaptation.lora import LoRAConfig, lora_parameters
    from omnidraft.export.training_export import export_training, lora_model
    from omnidraft.models import DEFAULT_DRAFTER, load_model
    from omnidraft.catalog import resolve_model_path

    model = lora_model(load_model(resolve_model_path(None, DEFAULT_DRAFTER)), LoRAConfig(rank=args.rank))
    args.cache.mkdir(parents=True, exist_ok=True)
    export_training(model, args.cache / "drafter_train.pte", args.window, args.batch, np.arange(args.mapped), 0.2,
                    args.kernels)
    (args.cache / "names.json").write_text(json.dumps(list(lora_parameters(model))))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # AdaptConfig's defaults, written out: the parent process must not import torch (its RSS is measured)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--rank", type=int, default=32)
    ap.add_argument("--mapped", type=int, default=40000, help="mapped vocabulary size (the default pair's is ~40k)")
    ap.add_argument("--kernels", choices=("portable", "xnnpack"), default="portable")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--cache", type=Path)
    args = ap.parse_args()
    if args.cache is None:
        from omnidraft.state import omnidraft_home

        args.cache = omnidraft_home() / "update_step" / f"w{args.window}-b{args.batch}-r{args.rank}-m{args.mapped}-{args.kernels}"
    ctx = mp.get_context("spawn")
    if not (args.cache / "names.json").exists():
        # In a process of its own: Linux keeps a process's peak RSS across fork and exec, so an export in
        # this process would become the learners' measured peak.
        p = ctx.Process(target=export, args=(args,))
        p.start()
        p.join()
        if p.exitcode:
            return 1
    rows = []
    for kind in ("eager", "executorch"):
        queue = ctx.Queue()
        p = ctx.Process(target=run, args=(kind, args, queue))
        p.start()
        rows.append(queue.get())
        p.join()
    print(f"update step, smollm2-135m LoRA rank {args.rank}, batch {args.batch} x window {args.window}, "
          f"{args.threads} threads, ExecuTorch {args.kernels} kernels")
    print("| learner | seconds per step (median) | peak RSS MB | losses |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['learner']} | {np.median(r['step_s']):.2f} | {r['peak_rss_mb']:.0f} | "
              f"{', '.join(f'{x:.4f}' for x in r['losses'])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
