"""Where a decode step's time goes: the target graph, the conversions around it, and the loop.

    .venv/bin/python benchmarks/call_overhead.py --bundle DIR --threads 2 --out benchmarks/results/call_overhead

For each backend (eager PyTorch, and the bundle's ExecuTorch programs) the target decodes prompts
alone (target-only, the loop with no proposer), and then verifies k tokens in one call. Three
clocks run at once:
  - graph: the model call itself (ExecuTorch's method.execute, onnxruntime's session.run, the
    eager model's forward);
  - runner: ModelRunner._forward around it (input tensors in, logits out as numpy);
  - loop: the decoder's whole step (the runner call, then verification's argmax, the text stream,
    the bookkeeping), per generated token.
loop - runner is the Python loop's share; runner - graph the conversions' (eager runs the model on
the runner's own tensors: no separate graph clock). Side by side in one run, threads fixed; medians
over the calls (the decode step: the mean over a generation, prefill excluded).
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
from omnidraft.pair import PairOptions, build_bundle_pair, open_pair
from omnidraft.runtime.choices import Backend
from omnidraft.runtime.decoding import GenerationConfig

sys.path.insert(0, str(Path(__file__).parent))
from common import save_results  # noqa: E402


class _Timed:
    """A proxy that times one method of the object it wraps (the graph call) and passes the rest through."""

    def __init__(self, inner, method: str, seconds: list):
        self._inner, self._method, self._seconds = inner, method, seconds

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if name != self._method:
            return attr

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return attr(*args, **kwargs)
            finally:
                self._seconds.append(time.perf_counter() - t0)

        return timed

    def __call__(self, *args, **kwargs):  # an eager model is called, not a method of it
        t0 = time.perf_counter()
        try:
            return self._inner(*args, **kwargs)
        finally:
            self._seconds.append(time.perf_counter() - t0)


def instrument(runner) -> tuple[list, list]:
    """(graph seconds, runner seconds) lists that every call of `runner` appends to; eager has no graph
    call apart from its runner (torch runs the model in place on the numpy-backed tensors): graph is None."""
    graph, whole = [], []
    if hasattr(runner, "method"):
        runner.method = _Timed(runner.method, "execute", graph)
    elif hasattr(runner, "session"):
        runner.session = _Timed(runner.session, "run", graph)
    else:
        graph = None
    inner = runner._forward

    def forward(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            whole.append(time.perf_counter() - t0)

    runner._forward = forward
    return graph, whole


def measure(pair, name: str, prompts: list[str], max_new: int, ks: list[int], reps: int) -> list[dict]:
    target = pair.decoder.target
    graph, whole = instrument(target)
    rows = []
    loop_ms, graph_ms, runner_ms = [], [], []
    for text in prompts:
        ids = pair.encode_prompt(text)
        pair.decoder.generate(ids, GenerationConfig(max_new_tokens=2, eos_ids=frozenset()))  # warm
        whole.clear()
        if graph is not None:
            graph.clear()
        r = pair.decoder.generate(ids, GenerationConfig(max_new_tokens=max_new, eos_ids=frozenset()))
        steps = r.stats.target_calls
        # the calls after the prefill are the decode steps (one token each)
        loop_ms.append(1000 * r.stats.decode_s / max(steps, 1))
        runner_ms.append(1000 * statistics.median(whole[-steps:]))
        graph_ms.append(runner_ms[-1] if graph is None else 1000 * statistics.median(graph[-steps:]))
    rows.append(_row(name, "decode step (1 token)", statistics.median(loop_ms), statistics.median(runner_ms),
                     None if graph is None else statistics.median(graph_ms)))
    prefix = pair.encode_prompt(prompts[0])
    for k in ks:  # a verification: k proposed tokens and the pending one in one call, then greedy verification
        target.rollback(0)
        target.forward(prefix[:-1], 0)
        tokens = prefix[-1:] + prefix[:k]
        loop = []
        whole.clear()
        if graph is not None:
            graph.clear()
        for _ in range(reps):
            target.rollback(len(prefix) - 1)
            t0 = time.perf_counter()
            logits = target.forward(tokens, len(prefix) - 1, k + 1)
            np.argmax(logits, axis=-1)
            loop.append(time.perf_counter() - t0)
        rows.append(_row(name, f"verify {k} + 1 tokens", 1000 * statistics.median(loop),
                         1000 * statistics.median(whole), None if graph is None else 1000 * statistics.median(graph)))
    return rows


def _row(backend, call, loop, runner, graph) -> dict:
    """graph None: not separable from the runner (eager)."""
    inside = runner if graph is None else graph
    return {"backend": backend, "call": call, "loop_ms": loop, "runner_ms": runner, "graph_ms": graph,
            "conversion_ms": None if graph is None else runner - graph, "loop_only_ms": loop - runner,
            "outside_graph": (loop - inside) / loop if loop > 0 else float("nan")}


def render(result: dict) -> str:
    lines = [f"Call overhead, target {result['target']}, greedy, {result['threads']} threads, {result['date']}. "
             f"Command: `{result['command']}`.", "",
             "| backend | call | whole step ms | runner ms | graph ms | conversions ms | loop ms | outside the graph |",
             "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        graph = "-" if r["graph_ms"] is None else f"{r['graph_ms']:.2f}"
        conv = "-" if r["conversion_ms"] is None else f"{r['conversion_ms']:.2f}"
        lines.append(f"| {r['backend']} | {r['call']} | {r['loop_ms']:.2f} | {r['runner_ms']:.2f} | {graph} "
                     f"| {conv} | {r['loop_only_ms']:.2f} | {100 * r['outside_graph']:.1f}% |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, action="append", default=[], help="an ExecuTorch bundle (repeatable)")
    ap.add_argument("--no-eager", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--k", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    prompts = corpora.prompts("prose", args.prompts, seed=3)
    rows = []
    if not args.no_eager:
        pair = open_pair(PairOptions(speculative=False, threads=args.threads))
        rows += measure(pair, "eager", prompts, args.max_new_tokens, args.k, args.reps)
    for bundle in args.bundle:
        pair = build_bundle_pair(bundle, Backend.EXECUTORCH, speculative=False, threads=args.threads)
        rows += measure(pair, f"executorch, {bundle.name}", prompts, args.max_new_tokens, args.k, args.reps)
    result = {"target": pair.target_name, "threads": args.threads, "date": time.strftime("%Y-%m-%d"),
              "command": "benchmarks/call_overhead.py " + " ".join(sys.argv[1:]), "rows": rows}
    save_results(args.out, result, render)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
