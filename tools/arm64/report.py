"""One bundle on x86 and on emulated arm64, side by side: loads, exactness, logits and operators.

    python tools/arm64/report.py --bundle DIR --out benchmarks/results/arm64-NAME [--cpu a76|max]

Runs tools/arm64/check.py natively and under qemu (env.py; built on first use), then
writes table.md and results.json: per machine whether every program loaded and whether
speculative greedy output equals the target's own greedy output; arm64 against x86 for
the same bundle (greedy tokens, first differing position, logits of the same call); and
the operators each machine ran, delegated to XNNPACK or on portable kernels (ETDump).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))
from env import build  # noqa: E402

from omnidraft.errors import OmniDraftError  # noqa: E402


def run_both(bundle: Path, out: Path, cpu: str, prompts: int, new_tokens: int, home: Path | None = None) -> dict:
    """check.py on this machine and under emulation (the environment in `home`, built if needed); the comparison."""
    args = ["--bundle", str(bundle), "--prompts", str(prompts), "--new-tokens", str(new_tokens)]
    check = str(HERE / "check.py")
    env = build(home)
    seconds = {}
    for machine in ("x86_64", "aarch64"):
        start = time.perf_counter()
        argv = [check, *args, "--out", str(out / machine)]
        if machine == "aarch64":
            done = env.run(argv, cpu, capture_output=True, text=True)
        else:
            done = subprocess.run([sys.executable, *argv], capture_output=True, text=True)
        seconds[machine] = time.perf_counter() - start
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise OmniDraftError(f"check.py failed on {machine}: {last[:300]}")
    return compare(out / "x86_64", out / "aarch64", seconds)


def compare(x86: Path, arm: Path, seconds: dict) -> dict:
    results = {m: json.loads((d / "result.json").read_text()) for m, d in (("x86_64", x86), ("aarch64", arm))}
    a, x = results["aarch64"], results["x86_64"]
    prompts = []
    for pa, px in zip(a["prompts"], x["prompts"]):
        first = next((i for i, (s, t) in enumerate(zip(pa["target_only"], px["target_only"])) if s != t), None)
        prompts.append({"prompt": pa["prompt"], "tokens": len(pa["target_only"]),
                        "arm_exact": pa["speculative"] == pa["target_only"],
                        "x86_exact": px["speculative"] == px["target_only"],
                        "same_as_x86": pa["target_only"] == px["target_only"], "first_difference": first})
    logits = {}
    for role in ("target", "drafter"):
        la, lx = np.load(arm / f"logits-{role}.npy"), np.load(x86 / f"logits-{role}.npy")
        finite = np.isfinite(lx)
        diff = np.abs(la[finite] - lx[finite])
        logits[role] = {"max_abs": float(diff.max()), "mean_abs": float(diff.mean()),
                        "scale": float(np.abs(lx[finite]).max()),
                        "top1_same": int((la.argmax(-1) == lx.argmax(-1)).sum()), "rows": int(la.shape[0])}
    operators = {role: {m: operator_counts(d / f"etdump-{role}.etdp") for m, d in (("x86_64", x86), ("aarch64", arm))}
                 for role in ("target", "drafter")}
    return {"bundle": a["bundle"], "quant": a["quant"], "programs": {m: r["programs"] for m, r in results.items()},
            "seconds": seconds, "prompts": prompts, "logits": logits, "operators": operators,
            "date": time.strftime("%Y-%m-%d")}


def operator_counts(etdump: Path) -> dict:
    """{operator: calls} of a trace: XNNPACK delegate calls and portable kernels by name."""
    import warnings

    from executorch.devtools import Inspector

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Output Buffer not found": no tensor data was asked for
        frame = Inspector(etdump_path=str(etdump)).to_dataframe()
    frame = frame[frame.event_block_name == "Execute"]
    counts = Counter()
    for name, raw in zip(frame.event_name, frame.raw):
        if name == "DELEGATE_CALL":
            counts["XNNPACK delegate calls"] += len(raw)
        elif name.startswith("native_call_"):
            counts[f"portable {name.removeprefix('native_call_')}"] += len(raw)
    return dict(counts)


def render(r: dict, command: str) -> str:
    lines = [f"Bundle `{Path(r['bundle']).name}` ({r['quant']}) on x86_64 and on arm64 under qemu user-mode emulation "
             f"(`{r.get('cpu', 'a76')}` core), {r['date']}. Command: `{command}`.", "",
             "| prompt | tokens | arm64: speculative = target-only | x86: speculative = target-only | "
             "arm64 target-only = x86 | first differing token |", "|---|---|---|---|---|---|"]
    for p in r["prompts"]:
        lines.append(f"| {p['prompt'][:40]!r} | {p['tokens']} | {_yes(p['arm_exact'])} | {_yes(p['x86_exact'])} | "
                     f"{_yes(p['same_as_x86'])} | {'-' if p['first_difference'] is None else p['first_difference']} |")
    lines += ["", "Logits at the same 64 prompt positions (8 tokens per call), arm64 against x86:", "",
              "| program | max abs difference | mean abs difference | largest logit | top-1 same |", "|---|---|---|---|---|"]
    for role, d in r["logits"].items():
        lines.append(f"| {role} | {d['max_abs']:.3g} | {d['mean_abs']:.3g} | {d['scale']:.3g} | "
                     f"{d['top1_same']} of {d['rows']} |")
    lines += ["", "Operators run by one 4-token and one 1-token call (ETDump events; custom ops record none):", "",
              "| program | operator | calls on x86_64 | calls on arm64 |", "|---|---|---|---|"]
    for role, by_machine in r["operators"].items():
        for name in sorted(set(by_machine["x86_64"]) | set(by_machine["aarch64"])):
            lines.append(f"| {role} | {name} | {by_machine['x86_64'].get(name, 0)} | {by_machine['aarch64'].get(name, 0)} |")
    loaded = [f"{m}: {len(progs)} files, {sum(len(v) for v in progs.values())} methods"
              for m, progs in r["programs"].items()]
    wall = [f"{m} {s:.0f} s" for m, s in r["seconds"].items()]
    lines += ["", f"Programs loaded: {'; '.join(loaded)}. Wall time: {', '.join(wall)}."]
    return "\n".join(lines) + "\n"


def _yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cpu", choices=("a76", "max"), default="a76")
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=24)
    args = ap.parse_args(argv)
    try:
        with tempfile.TemporaryDirectory() as runs:  # the raw runs (logits, traces) are not kept
            r = run_both(args.bundle, Path(runs), args.cpu, args.prompts, args.new_tokens)
    except OmniDraftError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    r["cpu"] = args.cpu
    command = " ".join(["tools/arm64/report.py", *(argv if argv is not None else sys.argv[1:])])
    (args.out / "results.json").write_text(json.dumps(r, indent=1))
    (args.out / "table.md").write_text(render(r, command))
    print(render(r, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
