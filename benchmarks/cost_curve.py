"""The cost curve at phone-class sizes: target step, verification and drafter cost on ExecuTorch.

    benchmarks/cost_curve.py --out benchmarks/results/cost_curve [--targets gemma-3-270m,qwen2.5-0.5b,...] [--quant 8da4w]

Latency does not depend on the weights' values, so each target is a random-init model
with the exact shapes of a public checkpoint (layers, widths, heads, grouped KV heads,
vocabulary, tied head), exported as the bundle exports it: lean graphs, `--quant`
(default 8da4w) and `--embedding-quant` (default int8), targets with 512 cache positions,
drafters with 1024 and their acceptance head. Programs are cached in
$OMNIDRAFT_HOME/cost_curve. Drafters: SmolLM2-135M (real weights) and a 4-layer SmolLM2
(random init), also with make-drafter's default draft head (its 16,384 most frequent
tokens); Gemma-3-270M (real weights) is the reference target. Per model, 2
threads: .pte size, export time, resident memory added by loading and running it, the
one-token step S after a 64-token prefill and the verification call V(k), k = 1..8 (medians;
all programs timed side by side, round-robin, in one process), memory in a fresh process.

Projection (labelled as such): with per-token acceptance a measured on the real pair and
c = drafter step / S, the expected speedup of drafting k tokens per round is
E(k) / (k c + V(k+1) / S), E(k) = (1 - a^(k+1)) / (1 - a) tokens per round (the
verification call carries the pending token and the k drafts); the table gives the best k.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import save_results  # noqa: E402

# Public configurations (config.json of each checkpoint), reduced to what sets the cost.
TARGETS = {
    "gemma-3-270m": None,  # the real checkpoint (build)
    "qwen2.5-0.5b": ("qwen2", dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                                   num_attention_heads=14, num_key_value_heads=2, rope_theta=1e6, max_position_embeddings=32768,
                                   rms_norm_eps=1e-6, tie_word_embeddings=True)),
    "llama-3.2-1b": ("llama", dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                                   num_attention_heads=32, num_key_value_heads=8, head_dim=64, rope_theta=500000.0,
                                   max_position_embeddings=131072,
                                   rms_norm_eps=1e-5, tie_word_embeddings=True,
                                   rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})),
    "qwen2.5-1.5b": ("qwen2", dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                                   num_attention_heads=12, num_key_value_heads=2, rope_theta=1e6, max_position_embeddings=32768,
                                   rms_norm_eps=1e-6, tie_word_embeddings=True)),
}
# Acceptance per drafted token with the adaptive draft length, measured on the real pair
# (benchmarks/RESULTS.md: the full drafter 0.65-0.68 in the suite, the 4-layer drafter 0.21).
ACCEPTANCE = {"smollm2-135m": 0.65, "smollm2-4l": 0.21, "smollm2-4l-head16k": 0.21}
HEAD_TOKENS = 16384  # smollm2-4l-head16k: the 4-layer drafter with make-drafter's default draft head
K_MAX = 8


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def build(name: str):
    from transformers import AutoConfig, AutoModelForCausalLM

    from omnidraft.models import DEFAULT_DRAFTER, DEFAULT_TARGET, load_model
    from omnidraft.catalog import resolve_model_path

    torch.manual_seed(0)
    if name == "gemma-3-270m":  # the real pair's target, for reference
        return load_model(resolve_model_path(None, DEFAULT_TARGET))
    if name in TARGETS:
        kind, fields = TARGETS[name]
        config = AutoConfig.for_model(kind, **fields)
        return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    model = load_model(resolve_model_path(None, DEFAULT_DRAFTER))
    if name.startswith("smollm2-4l"):
        config = copy.deepcopy(model.config)
        config.num_hidden_layers = 4
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    if name == "smollm2-4l-head16k":  # scores only its 16,384 most frequent tokens (draft_head.py)
        from omnidraft.draft_head import apply_draft_head, write_head
        from omnidraft.models import load_tokenizer
        from omnidraft.state import omnidraft_home

        folder = omnidraft_home() / "cost_curve" / "draft-head-16k"
        folder.mkdir(parents=True, exist_ok=True)
        if apply_draft_head(model, folder) is None:
            write_head(folder, load_tokenizer(resolve_model_path(None, DEFAULT_DRAFTER)), HEAD_TOKENS)
            apply_draft_head(model, folder)
    return model


def export(name: str, cache: Path, quant: str, embedding: str) -> Path:
    """The model's program, exported once into `cache` (its meta, export time and size beside it)."""
    from omnidraft.export.executorch_export import export_executorch

    path = cache / f"{name}-{quant}-{embedding}.pte"
    meta_path = path.with_suffix(".json")
    if not meta_path.exists():
        model = build(name)
        params = sum(p.numel() for p in model.parameters())
        start = time.perf_counter()
        drafter = name in ACCEPTANCE  # as a bundle exports them: drafters with the acceptance head, custom SDPA
        meta = export_executorch(model, path, max_context=1024 if drafter else 512, max_tokens=16, quant=quant,
                                 head=drafter, exact_rows=not drafter, embedding_quant=embedding)
        meta.update(export_s=time.perf_counter() - start, params=params)
        meta_path.write_text(json.dumps(meta))
        del model
    return path


def time_programs(programs: dict[str, tuple[Path, dict]], threads: int, reps: int) -> dict[str, dict[int, float]]:
    """Median ms of a k-token call after a 64-token prefill, k = 1..K_MAX, per program.

    All programs are loaded in this process and timed round-robin (every repetition calls
    every program at every k), so a slow phase of the machine weighs on all alike and the
    ratios (c, V(k)/S) compare calls made side by side.
    """
    from omnidraft.runtime.executorch_runner import ExecuTorchRunner

    torch.set_num_threads(threads)
    prefix = np.arange(1000, 1064)
    runners = {name: ExecuTorchRunner(path, meta, name=name) for name, (path, meta) in programs.items()}
    for r in runners.values():
        r.forward(prefix, 0)
    times = {name: {k: [] for k in range(1, K_MAX + 1)} for name in runners}
    for _ in range(reps):
        for name, r in runners.items():
            for k in range(1, K_MAX + 1):
                r.rollback(len(prefix))
                start = time.perf_counter()
                r.forward(prefix[:k], len(prefix), k)
                times[name][k].append((time.perf_counter() - start) * 1000)
    return {name: {k: statistics.median(v) for k, v in ks.items()} for name, ks in times.items()}


def memory_mb(path: Path, meta: dict, threads: int) -> float:
    """Resident memory that loading the program and a 64-token prefill add, in a fresh process."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_memory_of, str(path), meta, threads).result()


def _memory_of(path: str, meta: dict, threads: int) -> float:
    from omnidraft.runtime.executorch_runner import ExecuTorchRunner, load_custom_ops

    torch.set_num_threads(threads)
    load_custom_ops(meta["executorch_ops"])
    before = rss_mb()
    runner = ExecuTorchRunner(path, meta)
    runner.forward(np.arange(1000, 1064), 0)
    runner.forward(np.arange(1000, 1000 + K_MAX), 64, K_MAX)
    return rss_mb() - before


def projection(a: float, c: float, verify: dict, step: float) -> tuple[float, int]:
    """(expected speedup, k) at the best draft length k: a round drafts k tokens (k c target steps) and
    verifies k + 1 (the pending token and the drafts: V(k+1)); 1.0 and k = 0 when no k pays."""
    best = max(((1 - a ** (k + 1)) / (1 - a) / (k * c + verify[k + 1] / step), k) for k in range(1, K_MAX))
    return max(best, (1.0, 0))


def pairs_of(rows: list[dict]) -> list[dict]:
    drafters = [r for r in rows if r["name"] in ACCEPTANCE]
    pairs = []
    for t in (r for r in rows if r["name"] in TARGETS):
        verify = {int(k): v for k, v in t["verify_ms"].items()}
        for d in drafters:
            c = d["step_ms"] / t["step_ms"]
            speed, k = projection(ACCEPTANCE[d["name"]], c, verify, t["step_ms"])
            pairs.append({"target": t["name"], "drafter": d["name"], "c": c, "acceptance": ACCEPTANCE[d["name"]],
                          "best_k": k, "projected_speedup": speed})
    return pairs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--targets", default="gemma-3-270m,qwen2.5-0.5b,llama-3.2-1b", help=f"comma-separated, of {', '.join(TARGETS)}")
    ap.add_argument("--quant", default="8da4w", choices=("none", "8da4w", "8da8w"))
    ap.add_argument("--embedding-quant", default="int8", choices=("none", "int8", "int4"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=40, help="timed rounds (median per program and k)")
    ap.add_argument("--render-only", action="store_true",
                    help="recompute the projection, table and plot from --out's results.json")
    args = ap.parse_args()
    if args.render_only:
        result = json.loads((args.out / "results.json").read_text())
        for m in result["models"]:  # JSON keys are strings
            m["verify_ms"] = {int(k): v for k, v in m["verify_ms"].items()}
        result["pairs"] = pairs_of(result["models"])
        save_results(args.out, result, render)
        plot(result, args.out / "plot.png")
        return 0
    from omnidraft.state import omnidraft_home
    from omnidraft.progress import stage

    targets = [t for t in args.targets.split(",") if t]
    unknown = [t for t in targets if t not in TARGETS]
    if unknown:
        print(f"error: unknown target shape(s) {', '.join(unknown)} (choose from {', '.join(TARGETS)})", file=sys.stderr)
        return 2
    cache = omnidraft_home() / "cost_curve"
    cache.mkdir(parents=True, exist_ok=True)
    programs = {}
    for name in [*ACCEPTANCE, *targets]:  # all exports first, then all timings (nothing else running meanwhile)
        with stage(f"cost_curve: {name} program ({args.quant}, {args.embedding_quant} embeddings)"):
            path = export(name, cache, args.quant, args.embedding_quant)
            programs[name] = (path, json.loads(path.with_suffix(".json").read_text()))
    with stage(f"cost_curve: timing {len(programs)} programs side by side, {args.reps} rounds"):
        timings = time_programs(programs, args.threads, args.reps)
    rows = []
    for name, (path, meta) in programs.items():
        with stage(f"cost_curve: memory of {name}"):
            memory = memory_mb(path, meta, args.threads)
        rows.append({"name": name, "params": meta["params"], "pte_mb": path.stat().st_size / 2**20,
                     "export_s": meta["export_s"], "rss_mb": memory, "step_ms": timings[name][1],
                     "verify_ms": timings[name]})
    result = {"command": " ".join(["benchmarks/cost_curve.py", *sys.argv[1:]]), "threads": args.threads,
              "quant": args.quant, "embedding_quant": args.embedding_quant, "date": time.strftime("%Y-%m-%d"),
              "models": rows, "pairs": pairs_of(rows)}
    save_results(args.out, result, render)
    plot(result, args.out / "plot.png")
    return 0


def plot(r: dict, path: Path) -> None:
    """Projected speedup against the cost ratio c, per target and acceptance; measured c marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cs = np.geomspace(0.005, 1.5, 200)
    targets = [m for m in r["models"] if m["name"] in TARGETS]
    panels = sorted(set(ACCEPTANCE.values()), reverse=True)
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5), sharey=True, squeeze=False)
    for ax, a in zip(axes[0], panels):
        for i, t in enumerate(targets):
            verify = {int(k): v for k, v in t["verify_ms"].items()}
            line, = ax.plot(cs, [projection(a, c, verify, t["step_ms"])[0] for c in cs], label=t["name"], color=f"C{i}")
            for p in r["pairs"]:
                if p["target"] == t["name"]:
                    ax.plot(p["c"], projection(a, p["c"], verify, t["step_ms"])[0], "o" if p["acceptance"] == a else "x",
                            color=line.get_color())
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("cost ratio c = drafter step / target step")
        names = ", ".join(d for d, v in ACCEPTANCE.items() if v == a)
        ax.set_title(f"acceptance a = {a} ({names}; measured on the real pair)", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("projected speedup (not measured)")
    axes[0][0].legend(title="target (o: measured c of this panel's drafters, x: the others')", fontsize=8)
    fig.suptitle(f"Projection E(k)/(k c + V(k+1)/S), best k, from measured S and V(k); ExecuTorch {r['quant']}, {r['threads']} threads")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render(r: dict) -> str:
    lines = [f"ExecuTorch ({r['quant']}, {r['embedding_quant']} embedding tables, lean graphs, XNNPACK), {r['threads']} threads, {r['date']}; random-init models with "
             f"the exact shapes of the named checkpoints (SmolLM2-135M: real weights); medians in ms after a 64-token "
             f"prefill. Command: `{r['command']}`.", "",
             "| model | parameters | .pte MB | export s | memory MB | step S | " +
             " | ".join(f"V({k})" for k in range(1, K_MAX + 1)) + " |",
             "|---|---|---|---|---|---|" + "---|" * K_MAX]
    for m in r["models"]:
        lines.append(f"| {m['name']} | {m['params'] / 1e6:.0f}M | {m['pte_mb']:.0f} | {m['export_s']:.0f} | "
                     f"{m['rss_mb']:.0f} | {m['step_ms']:.1f} | " +
                     " | ".join(f"{m['verify_ms'][k]:.1f}" for k in range(1, K_MAX + 1)) + " |")
    lines += ["", "Projection (not a measurement): expected speedup = E(k) / (k c + V(k+1)/S), E(k) = (1 - a^(k+1)) / (1 - a), "
              "best k (0: no k pays, target alone); a = acceptance measured on the real pair (Gemma-3-270M target).", "",
              "| target | drafter | c | a | best k | projected speedup |", "|---|---|---|---|---|---|"]
    for p in r["pairs"]:
        lines.append(f"| {p['target']} | {p['drafter']} | {p['c']:.3f} | {p['acceptance']:.2f} | {p['best_k']} | "
                     f"{p['projected_speedup']:.2f}x |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
