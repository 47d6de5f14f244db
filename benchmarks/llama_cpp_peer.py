"""llama.cpp as a peer: its target-only decoding and its n-gram lookup against ours, same target, same
prompts, side by side in one run.

    .venv/bin/python benchmarks/llama_cpp_peer.py --bundle ~/.cache/omnidraft/bundles/et-8da8w-d8da4w \\
        --threads 2 --out benchmarks/results/llama_cpp_peer

llama.cpp (build b11434) is built from source once (tools/llama_cpp/build.sh, about 4 minutes);
the prepared target (Gemma-3-270M, fp32) is converted with llama.cpp's own converter to f16 and
quantized to Q8_0, once. Per prompt, in turn: llama.cpp target-only (`llama-completion`), llama.cpp
lookup (`llama-lookup`, its prompt-lookup decoding: n-grams of the context drafted and verified),
this project's target-only on the bundle's ExecuTorch target, and this project's default
`generate` (the hybrid of lookup and the drafter) on the same bundle, its learned state starting
empty (first contact) and learning across the prompts, as a user's would. Greedy, threads fixed,
decode-phase tokens per second as each system reports it. `--workloads` picks the prompts: the open-ended
domains (the default) and the workloads whose continuations repeat their input (code-infile, structured,
quote), reported per workload.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from omnidraft import corpora
from omnidraft.catalog import resolve_model_path
from omnidraft.models import DEFAULT_TARGET
from omnidraft.pair import PairOptions, open_pair
from omnidraft.runtime.choices import Backend, ProposerKind
from omnidraft.runtime.decoding import GenerationConfig
from omnidraft.runtime.sampling import Sampler
from omnidraft.state import omnidraft_home

sys.path.insert(0, str(Path(__file__).parent))
from common import save_results  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TEXT_WORKLOADS = ("code-infile", "structured", "quote")  # corpora's workloads whose prompts are plain text


def llama_cpp() -> Path:
    out = subprocess.run([str(REPO / "tools" / "llama_cpp" / "build.sh")], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def q8_target(root: Path) -> Path:
    """The prepared target as a Q8_0 GGUF, made with llama.cpp's own converter and quantizer (once)."""
    folder = resolve_model_path(None, DEFAULT_TARGET)
    models = omnidraft_home() / "llama.cpp" / "models"
    f16, q8 = models / f"{DEFAULT_TARGET.name}-f16.gguf", models / f"{DEFAULT_TARGET.name}-q8_0.gguf"
    if q8.is_file():
        return q8
    models.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(root / "gguf-py"))
    print(f"[peer] converting {folder} to {f16.name}", file=sys.stderr)
    subprocess.run([sys.executable, str(root / "convert_hf_to_gguf.py"), str(folder), "--outtype", "f16",
                    "--outfile", str(f16)], check=True, env=env, capture_output=True)
    subprocess.run([str(root / "bin" / "llama-quantize"), str(f16), str(q8.with_suffix(".partial")), "Q8_0"],
                   check=True, capture_output=True)
    q8.with_suffix(".partial").rename(q8)
    return q8


def run_llama(binary: Path, model: Path, prompt: str, n: int, threads: int, extra=(), temperature: float = 0.0,
              top_p: float = 1.0, seed: int = 1) -> tuple[float, str]:
    """(decode tokens per second as the tool reports it, its output text)."""
    cmd = [str(binary), "-m", str(model), "-p", prompt, "-n", str(n), "-t", str(threads), "--temp", str(temperature),
           "--top-p", str(top_p), "--seed", str(seed), *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    log = done.stderr + done.stdout
    if done.returncode != 0:
        raise RuntimeError(f"{binary.name} failed: {log[-400:]}")
    m = re.search(r"decoded\s+(\d+)\s+tokens in\s+([\d.]+)\s+seconds", log)  # llama-lookup
    if m:
        return int(m.group(1)) / float(m.group(2)), done.stdout
    m = re.search(r"eval time =\s+([\d.]+) ms /\s+(\d+) runs", log)  # llama-completion (its decode phase)
    if not m:
        raise RuntimeError(f"no timing in {binary.name}'s output: {log[-400:]}")
    return int(m.group(2)) / (float(m.group(1)) / 1000), done.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, required=True, help="this project's ExecuTorch bundle of the same target")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=4, help="per workload")
    ap.add_argument("--workloads", default="code,prose,chat",
                    help="comma-separated: open-ended domains (code, prose, chat) and text workloads that repeat "
                         "their input (code-infile, structured, quote)")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--compare", type=Path, action="append", default=[],
                    help="another bundle of the same target: its target-only and default rows too (ratios against "
                         "--bundle's target-only), e.g. one exported by an earlier version")
    ap.add_argument("--draft-max", type=int, default=3, help="llama-lookup's --spec-draft-n-max")
    ap.add_argument("--temperature", type=float, default=0.0, help="sample (a seed per prompt); 0: greedy")
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in workloads if w not in corpora.DOMAINS + TEXT_WORKLOADS]
    if unknown or not workloads:
        ap.error(f"--workloads: choose from {', '.join(corpora.DOMAINS + TEXT_WORKLOADS)}")
    if args.prompts < 1 or args.max_new_tokens < 1 or args.threads < 1:
        ap.error("--prompts, --max-new-tokens and --threads must be at least 1")
    if args.temperature < 0 or not 0 < args.top_p <= 1:
        ap.error("--temperature must be >= 0 and --top-p in (0, 1]")
    torch.set_num_threads(args.threads)
    root = llama_cpp()
    model = q8_target(root)
    home = omnidraft_home()
    prompts = [(w, p) for w in workloads for p in (corpora.prompts(w, args.prompts, seed=11) if w in corpora.DOMAINS
                                                   else corpora.workload(w, args.prompts, seed=11))]
    with tempfile.TemporaryDirectory() as state:  # our learned state starts empty: first contact
        os.environ["OMNIDRAFT_HOME"] = state
        (Path(state) / "models").symlink_to(home / "models", target_is_directory=True)
        ours = {}
        for bundle in [args.bundle, *args.compare]:
            label = "" if bundle == args.bundle else f", {bundle.name}"
            ours[f"ours target-only{label}"] = open_pair(PairOptions(
                backend=Backend.EXECUTORCH, bundle=bundle, speculative=False, threads=args.threads))
            ours[f"ours default{label}"] = open_pair(PairOptions(
                backend=Backend.EXECUTORCH, bundle=bundle, proposer=ProposerKind.HYBRID, threads=args.threads))
        rows = {k: [] for k in ("llama.cpp target-only", "llama.cpp lookup", *ours)}
        sampled = {"temperature": args.temperature, "top_p": args.top_p}
        for i, (_, text) in enumerate(prompts):
            rows["llama.cpp target-only"].append(run_llama(root / "bin" / "llama-completion", model, text,
                                                           args.max_new_tokens, args.threads, ["-no-cnv"], **sampled,
                                                           seed=i + 1)[0])
            rows["llama.cpp lookup"].append(run_llama(root / "bin" / "llama-lookup", model, text, args.max_new_tokens,
                                                      args.threads, ["--spec-draft-n-max", str(args.draft_max)],
                                                      **sampled, seed=i + 1)[0])
            for name, pair in ours.items():
                ids = pair.encode_prompt(text)
                config = GenerationConfig(max_new_tokens=args.max_new_tokens, eos_ids=frozenset(),
                                          sampler=Sampler(args.temperature, args.top_p), seed=i + 1,
                                          **(pair.draft.config_fields() if pair.draft else {}))
                rows[name].append(pair.decoder.generate(ids, config).stats.tokens_per_s)
            print(f"[peer] prompt {i + 1}/{len(prompts)}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in rows.items()),
                  file=sys.stderr)
    table = []
    for workload in workloads:
        picked = [i for i, (w, _) in enumerate(prompts) if w == workload]
        table += summarize({name: [tps[i] for i in picked] for name, tps in rows.items()}, workload)
    result = {"date": time.strftime("%Y-%m-%d"), "threads": args.threads, "prompts": args.prompts,
              "temperature": args.temperature, "top_p": args.top_p,
              "workloads": workloads,
              "max_new_tokens": args.max_new_tokens, "llama_cpp": "b11434", "gguf": model.name,
              "bundle": args.bundle.name, "compare": [b.name for b in args.compare],
              "command": "benchmarks/llama_cpp_peer.py " + " ".join(sys.argv[1:]),
              "rows": table, "per_prompt": rows, "prompt_workloads": [w for w, _ in prompts]}
    save_results(args.out, result, render)
    return 0


def summarize(rows: dict[str, list[float]], workload: str) -> list[dict]:
    """A workload's rows: medians over its prompts of tokens per second and of per-prompt ratios against each
    system's own target-only, against llama.cpp's target-only and against llama.cpp's best configuration (of
    target-only and lookup, the one with the higher median on this workload)."""
    base = {"llama.cpp": rows["llama.cpp target-only"], "ours": rows["ours target-only"]}
    best = max(("llama.cpp target-only", "llama.cpp lookup"), key=lambda k: statistics.median(rows[k]))
    table = []
    for name, tps in rows.items():
        own = [a / b for a, b in zip(tps, base[name.split()[0]])]
        table.append({"workload": workload, "method": name, "tokens_per_s": statistics.median(tps),
                      "vs_own_target_only": statistics.median(own), "worst_vs_own": min(own),
                      "vs_llama_cpp_target_only": statistics.median(
                          [a / b for a, b in zip(tps, rows["llama.cpp target-only"])]),
                      "vs_llama_cpp_best": statistics.median([a / b for a, b in zip(tps, rows[best])]),
                      "llama_cpp_best": best})
    return table


def render(r: dict) -> str:
    lines = [f"llama.cpp {r['llama_cpp']} ({r['gguf']}) against this project ({r['bundle']}), {r['prompts']} prompts "
             f"per workload ({', '.join(r['workloads'])}), {r['max_new_tokens']} new tokens, "
             + (f"temperature {r['temperature']} top-p {r['top_p']} (a seed per prompt)" if r.get("temperature")
                else "greedy") + f", {r['threads']} "
             f"threads, {r['date']}. Medians over a workload's prompts of tokens per second and of per-prompt "
             f"ratios; \"llama.cpp's best\": its target-only or its lookup, whichever has the higher median on the "
             f"workload. Command: `{r['command']}`.", "",
             "| workload | method | tok/s | vs its own target-only | worst prompt | vs llama.cpp target-only "
             "| vs llama.cpp's best |",
             "|---|---|---|---|---|---|---|"]
    for row in r["rows"]:
        lines.append(f"| {row['workload']} | {row['method']} | {row['tokens_per_s']:.1f} | "
                     f"{row['vs_own_target_only']:.2f}x | {row['worst_vs_own']:.2f}x | "
                     f"{row['vs_llama_cpp_target_only']:.2f}x | {row['vs_llama_cpp_best']:.2f}x |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
