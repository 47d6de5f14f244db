"""What a drafter's output head costs on ExecuTorch (XNNPACK), per way of writing it.

    benchmarks/head_ops.py --drafter DIR --out benchmarks/results/head_ops

DIR needs a draft head (omnidraft draft-head). Each variant is lowered alone,
with the drafter's real tied head weights, and timed on one hidden state (a
drafting step), after checking it against eager. The variants show where a
draft head's saving comes from and the pitfall the shipped `SubsetHead` avoids:
a matmul by a transposed constant is not packed as a fully-connected op.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from omnidraft.draft_head import SubsetHead, read_head
from omnidraft.export.executorch_export import lower_to_xnnpack
from omnidraft.models import load_model

sys.path.insert(0, str(Path(__file__).parent))
from common import save_results  # noqa: E402


class Linear(torch.nn.Module):
    def __init__(self, weight):
        super().__init__()
        self.register_buffer("weight", weight.clone())

    def forward(self, hidden):
        return F.linear(hidden, self.weight)


class TransposedMatmul(Linear):
    def forward(self, hidden):
        return hidden @ self.weight.T


class TransposedSubsetHead(SubsetHead):
    """The first draft head: the kept rows as `hidden @ W.T`, then the same scatter."""

    def forward(self, hidden):
        return self.widen(hidden @ self.weight_subset.T)


def time_ms(method, hidden, reps: int) -> float:
    for _ in range(10):
        method.execute([hidden])
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        method.execute([hidden])
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drafter", type=Path, required=True, help="drafter folder with a draft head")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from executorch.runtime import Runtime

    head = load_model(args.drafter).get_output_embeddings()
    ids = read_head(args.drafter, head.weight.shape[0])
    if ids is None:
        sys.exit(f"{args.drafter} has no draft head (run omnidraft draft-head first)")
    subset = head.weight[torch.tensor(sorted(ids))]
    variants = {
        "full head, linear": Linear(head.weight),
        "full head, matmul by transposed constant": TransposedMatmul(head.weight),
        "kept rows only, linear (no scatter)": Linear(subset),
        "draft head as shipped (linear + scatter to full width)": SubsetHead(head, ids),
        "draft head, matmul by transposed constant + scatter": TransposedSubsetHead(head, ids),
    }
    hidden = torch.randn(1, 1, head.weight.shape[1])
    rows = []
    for name, module in variants.items():
        path = args.out / "pte" / f"{len(rows)}.pte"
        path.parent.mkdir(parents=True, exist_ok=True)
        seq = torch.export.Dim("seq", min=1, max=16)
        lower_to_xnnpack(module.eval(), (torch.randn(1, 2, hidden.shape[-1]),), ({1: seq},), path, strict=False)
        method = Runtime.get().load_program(str(path)).load_method("forward")
        with torch.no_grad():
            want = module(hidden)
        got = method.execute([hidden])[0]
        scored = torch.isfinite(want)
        assert torch.equal(scored, torch.isfinite(got)), name
        err = float((got[scored] - want[scored]).abs().max())
        rows.append({"variant": name, "rows": int(scored.sum()), "ms": time_ms(method, hidden, args.reps),
                     "max_abs_diff": err})
        print(f"{name}: {rows[-1]['ms']:.2f} ms", file=sys.stderr)
        path.unlink()
    result = {"command": " ".join(["benchmarks/head_ops.py", *sys.argv[1:]]), "threads": args.threads,
              "date": time.strftime("%Y-%m-%d"), "drafter": args.drafter.name, "kept": len(ids), "variants": rows}
    save_results(args.out, result, render)
    return 0


def render(r: dict) -> str:
    lines = [f"Output head of {r['drafter']} on ExecuTorch (XNNPACK, fp32), one hidden state, {r['threads']} threads, "
             f"{r['date']}, median ms. Command: `{r['command']}`.", "",
             "| variant | rows scored | ms | max abs diff vs eager |", "|---|---|---|---|"]
    for v in r["variants"]:
        lines.append(f"| {v['variant']} | {v['rows']:,} | {v['ms']:.2f} | {v['max_abs_diff']:.1e} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
