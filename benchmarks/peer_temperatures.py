"""One table per temperature, side by side: runs of `llama_cpp_peer.py` at several temperatures, gathered.

    benchmarks/peer_temperatures.py benchmarks/results/llama_cpp_peer_t0 benchmarks/results/llama_cpp_peer_t0.7 \
        benchmarks/results/llama_cpp_peer_t0.8 benchmarks/results/llama_cpp_peer_t1.0 \
        --out benchmarks/results/peer_temperatures

Each row: a workload at a temperature, with tokens per second of our target-only and default and of
llama.cpp's target-only and lookup, each speculative method's median per-prompt ratio to its own
target-only (and its worst prompt). Nothing is measured here: the numbers are the runs' own.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import save_results  # noqa: E402

METHODS = ("ours target-only", "ours default", "llama.cpp target-only", "llama.cpp lookup")


def gather(runs: list[dict]) -> list[dict]:
    rows = []
    for run in sorted(runs, key=lambda r: r["temperature"]):
        for workload in run["workloads"]:
            got = {r["method"]: r for r in run["rows"] if r["workload"] == workload}
            if not all(m in got for m in METHODS):
                raise SystemExit(f"a run at temperature {run['temperature']} lacks a method for {workload}")
            rows.append({"temperature": run["temperature"], "top_p": run["top_p"], "workload": workload,
                         **{m: got[m]["tokens_per_s"] for m in METHODS},
                         "ours_ratio": got["ours default"]["vs_own_target_only"],
                         "ours_worst": got["ours default"]["worst_vs_own"],
                         "llama_ratio": got["llama.cpp lookup"]["vs_own_target_only"],
                         "llama_worst": got["llama.cpp lookup"]["worst_vs_own"],
                         "vs_llama_best": got["ours default"]["vs_llama_cpp_best"]})
    return rows


def render(r: dict) -> str:
    lines = [f"{r['runs']} runs of `benchmarks/llama_cpp_peer.py` (one per temperature, top-p {r['top_p']} when "
             f"sampling), gathered by `{r['command']}`. tok/s are medians over a workload's prompts; ratios are "
             f"medians of per-prompt ratios to the method's own target-only (worst prompt in brackets).", "",
             "| T | workload | ours target-only | ours default | default vs target-only | llama.cpp target-only "
             "| llama.cpp lookup | lookup vs target-only | ours default vs llama.cpp's best |",
             "|---|---|---|---|---|---|---|---|---|"]
    for x in r["rows"]:
        lines.append(f"| {x['temperature']:g} | {x['workload']} | {x['ours target-only']:.1f} | {x['ours default']:.1f} "
                     f"| {x['ours_ratio']:.2f}x ({x['ours_worst']:.2f}x) | {x['llama.cpp target-only']:.1f} "
                     f"| {x['llama.cpp lookup']:.1f} | {x['llama_ratio']:.2f}x ({x['llama_worst']:.2f}x) "
                     f"| {x['vs_llama_best']:.2f}x |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, nargs="+", help="result folders of llama_cpp_peer.py")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    runs = []
    for folder in args.runs:
        try:
            runs.append(json.loads((folder / "results.json").read_text()))
        except (OSError, ValueError) as e:
            ap.error(f"{folder}: no readable results.json ({e})")
    top_p = sorted({r["top_p"] for r in runs if r["temperature"] > 0}) or [1.0]
    result = {"runs": len(runs), "top_p": ", ".join(f"{p:g}" for p in top_p), "rows": gather(runs),
              "commands": [r["command"] for r in runs],
              "command": "benchmarks/peer_temperatures.py " + " ".join(sys.argv[1:])}
    save_results(args.out, result, render)
    return 0


if __name__ == "__main__":
    sys.exit(main())
