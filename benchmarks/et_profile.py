"""Where an ExecuTorch decoding step spends its time: ETDump operator profile of one graph.

    benchmarks/et_profile.py --bundle DIR [--role drafter] --out benchmarks/results/et_profile

Prefills 64 tokens, then times `--steps` single-token calls with ExecuTorch's
event tracer and reports, per call (median over the calls), the whole step,
the XNNPACK delegate calls and the portable (non-delegated) operators by kind.
Many small delegate partitions and portable copies between them are per-call
overhead that no amount of arithmetic saving removes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

from omnidraft.bundle import load_bundle
from omnidraft.runtime.executorch_runner import load_custom_ops

sys.path.insert(0, str(Path(__file__).parent))
from common import save_results  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--role", choices=("drafter", "target"), default="drafter")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from executorch.devtools import Inspector
    from executorch.runtime import Runtime

    bundle = load_bundle(args.bundle, verify_hashes=False)
    meta = bundle.model(args.role)
    load_custom_ops(meta.executorch_ops)
    program = Runtime.get().load_program(str(bundle.graph_path(args.role, "executorch")), enable_etdump=True)
    method = program.load_method("forward")
    head = []
    if meta.acceptance_head:
        head = [torch.zeros(int(meta.acceptance_head["features"])), torch.zeros(1)]
    prefill = 16
    for start in range(0, 64, prefill):
        method.execute([torch.arange(300 + start, 300 + start + prefill).unsqueeze(0),
                        torch.arange(start, start + prefill).unsqueeze(0), *head])
    for _ in range(args.steps):
        method.execute([torch.tensor([[5]]), torch.tensor([[64]]), *head])
    etdump = args.out / "etdump.etdp"
    args.out.mkdir(parents=True, exist_ok=True)
    program.write_etdump_result_to_file(str(etdump), str(args.out / "debug.bin"))
    frame = Inspector(etdump_path=str(etdump)).to_dataframe()
    frame = frame[frame.event_block_name == "Execute"]

    def per_call(raw) -> float:  # median ms over the single-token calls
        return statistics.median(list(raw)[-args.steps:]) if len(raw) else 0.0

    groups: dict[str, list[float]] = defaultdict(list)
    step = None
    for name, raw in zip(frame.event_name, frame.raw):
        ms = per_call(raw)
        if name == "Method::execute":
            step = ms
        elif name == "DELEGATE_CALL":
            groups["XNNPACK delegate calls"].append(ms)
        elif name.startswith("native_call_"):
            groups[f"portable {name.removeprefix('native_call_')}"].append(ms)
    rows = sorted(({"what": k, "calls": len(v), "ms": sum(v)} for k, v in groups.items()), key=lambda r: -r["ms"])
    # Custom operators (llama::update_cache, llama::custom_sdpa) record no event of their own: they and
    # the runtime's own work are what the listed events leave of the step.
    rows.append({"what": "rest: custom ops and runtime", "calls": None,
                 "ms": max(0.0, step - sum(r["ms"] for r in rows))})
    result = {"command": " ".join(["benchmarks/et_profile.py", *sys.argv[1:]]), "threads": args.threads,
              "date": time.strftime("%Y-%m-%d"), "bundle": args.bundle.name, "role": args.role,
              "step_ms": step, "rows": rows}
    etdump.unlink()
    (args.out / "debug.bin").unlink(missing_ok=True)
    save_results(args.out, result, render)
    return 0


def render(r: dict) -> str:
    lines = [f"ExecuTorch profile of the {r['role']} of bundle {r['bundle']}, one-token step after a 64-token "
             f"prefill, {r['threads']} threads, {r['date']}: median per step, whole step {r['step_ms']:.2f} ms. "
             f"Command: `{r['command']}`.", "", "| what | calls per step | ms per step |", "|---|---|---|"]
    for row in [*r["rows"][:-1][:12], r["rows"][-1]]:
        lines.append(f"| {row['what']} | {'-' if row['calls'] is None else row['calls']} | {row['ms']:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
