"""Long contexts: decode speed at a fill, prefill and time to first token, memory, side by side with llama.cpp.

    .venv/bin/python benchmarks/long_context.py --bundle ~/.cache/omnidraft/bundles/et-8da8w-d8da4w \\
        --short-bundle ~/.cache/omnidraft/bundles/et-512-e8 --threads 2 --out benchmarks/results/long_context

At each fill (tokens already in the context when decoding starts), two prompts: a long stretch of a
Python standard-library module of the evaluation split cut mid-file (code: open-ended, lookup finds the
file's identifiers) and a long stretch of a play followed by a request to quote one of its passages
word for word (grounded). Each runs target-only and the default `generate` (the hybrid, its learned
state starting empty) on the bundle's ExecuTorch graphs, greedy, the outputs compared token for token.
A fill's row reports decode tokens per second (after the prompt is read), the prompt's reading
(prefill tokens per second) and the time to the first new token. With --short-bundle, the same
target exported with a 512-position window decodes the shortest prompts too: the reference of "a
512-position bundle on a short prompt". Target-only decoding is timed --repeats times on its prompt (the
prompt read once, then reused; the median reported), since one 64-token run varies by several percent here.
Resident memory (VmRSS) is read after each prompt's prefill.
llama.cpp (b11434, the same target at Q8_0) runs `llama-bench -p 512,3000 -n 64 -d D` for the same
fills: decode at a depth and prompt processing. Threads fixed and reported.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from omnidraft import corpora
from omnidraft.pair import PairOptions, open_pair
from omnidraft.runtime.choices import Backend, ProposerKind
from omnidraft.runtime.decoding import GenerationConfig
from omnidraft.state import omnidraft_home

sys.path.insert(0, str(Path(__file__).parent))
from common import save_results  # noqa: E402
from llama_cpp_peer import llama_cpp, q8_target  # noqa: E402


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def long_prompts(tokenizer, fill: int, seed: int = 7) -> dict[str, list[int]]:
    """{kind: target token ids} of about `fill` tokens: code cut mid-file, and a play with a quoting request."""
    rng = random.Random(seed)
    code_files = [p for p in corpora._code_items() if corpora._split_of(p.name) == "eval"]
    rng.shuffle(code_files)
    code = ""
    for p in code_files:
        code += p.read_text(encoding="utf-8", errors="replace")
        if len(tokenizer.encode(code, add_special_tokens=False)) > fill + 50:
            break
    out = {"code": tokenizer.encode(code, add_special_tokens=True)[:fill]}
    plays = [p for p in corpora._prose_items() if corpora._split_of(p.name) == "eval"]
    lines = [ln for ln in rng.choice(plays).read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    start = rng.randrange(0, len(lines) // 3)
    ask = "\n\nThe passage that begins \"{}\", quoted word for word:\n\n{}\n"
    n_lines = 8
    ids = []
    while start + n_lines < len(lines):  # grow the excerpt while the prompt stays within the fill
        passage = lines[start : start + n_lines]
        quoted = passage[len(passage) // 2]
        text = "\n".join(passage) + ask.format(quoted[:40], quoted)
        grown = tokenizer.encode(text, add_special_tokens=True)
        if len(grown) > fill and ids:
            break
        ids = grown
        n_lines += 2
    out["grounded"] = ids
    return out


def run_llama_bench(root: Path, model: Path, threads: int, fills: list[int], prompt_lengths: list[int]) -> list[dict]:
    """llama-bench's prompt processing (at depth 0) and decoding of 64 tokens at each fill."""
    rows = []
    for p, n, depths in ((",".join(map(str, prompt_lengths)), "0", "0"), ("0", "64", ",".join(map(str, fills)))):
        cmd = [str(root / "bin" / "llama-bench"), "-m", str(model), "-t", str(threads), "-p", p, "-n", n, "-d",
               depths, "-o", "json"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise RuntimeError(f"llama-bench failed: {done.stderr[-400:]}")
        rows += [{"n_prompt": r["n_prompt"], "n_gen": r["n_gen"], "n_depth": r.get("n_depth", 0),
                  "tokens_per_s": r["avg_ts"]} for r in json.loads(done.stdout)]
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, required=True, help="the ExecuTorch bundle (a 4096-position window)")
    ap.add_argument("--short-bundle", type=Path, help="the same target exported with --max-context 512 (reference)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--fills", default="128,1024,2048,3000,4000")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3, help="target-only decodes timed per prompt (median)")
    ap.add_argument("--no-llama-cpp", action="store_true")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    fills = [int(f) for f in args.fills.split(",")]
    if args.threads < 1 or args.max_new_tokens < 1 or args.repeats < 1 or not fills or min(fills) < 2:
        ap.error("--threads, --max-new-tokens and --repeats at least 1, --fills a list of fills of at least 2")
    torch.set_num_threads(args.threads)
    home = omnidraft_home()
    peer = None if args.no_llama_cpp else (llama_cpp(), None)  # built (once) in the real home, before the swap
    if peer:
        peer = (peer[0], q8_target(peer[0]))
    rows, memory = [], []
    with tempfile.TemporaryDirectory() as state:  # learned state starts empty: first contact
        os.environ["OMNIDRAFT_HOME"] = state
        (Path(state) / "models").symlink_to(home / "models", target_is_directory=True)
        pairs = {"target-only": open_pair(PairOptions(backend=Backend.EXECUTORCH, bundle=args.bundle, speculative=False,
                                                      threads=args.threads))}
        # memory first, with only the target's program loaded: resident MB as its cache fills
        target = pairs["target-only"].decoder.target
        text = long_prompts(pairs["target-only"].target_vocab.tokenizer, target.max_context - 1)["code"]
        memory.append({"fill": 0, "rss_mb": rss_mb()})
        for fill in (512, 2048, target.max_context - 1):
            target.forward(text[target.position:fill], target.position, 1)
            memory.append({"fill": fill, "rss_mb": rss_mb()})
        pairs |= {"default": open_pair(PairOptions(backend=Backend.EXECUTORCH, bundle=args.bundle,
                                                  proposer=ProposerKind.HYBRID, threads=args.threads))}
        if args.short_bundle:
            pairs["target-only, 512 window"] = open_pair(PairOptions(
                backend=Backend.EXECUTORCH, bundle=args.short_bundle, speculative=False, threads=args.threads))
        window = pairs["target-only"].decoder.target.max_context
        tokenizer = pairs["target-only"].target_vocab.tokenizer
        for fill in fills:
            for kind, ids in long_prompts(tokenizer, min(fill, window - args.max_new_tokens - 1)).items():
                results = {}
                for name, pair in pairs.items():
                    if len(ids) + args.max_new_tokens >= pair.decoder.target.max_context:
                        continue
                    pair.decoder.target.reset()  # every prompt read afresh: its prefill is measured
                    config = GenerationConfig(max_new_tokens=args.max_new_tokens, eos_ids=frozenset(),
                                              **(pair.draft.config_fields() if pair.draft else {}))
                    r = pair.decoder.generate(ids, config)
                    s = r.stats
                    step = s.timings.target_step_ms or 0.0
                    results[name] = r.token_ids
                    runs = [s.tokens_per_s]  # target-only again on the same prompt (the default would have learned it)
                    if name.startswith("target-only"):
                        runs += [pair.decoder.generate(ids, config).stats.tokens_per_s for _ in range(args.repeats - 1)]
                    rows.append({"fill": len(ids), "kind": kind, "method": name, "tokens_per_s": statistics.median(runs),
                                 "tokens_per_s_runs": runs,
                                 "prefill_tokens_per_s": (len(ids) - 1) / max(s.prefill_s, 1e-9),
                                 "time_to_first_token_s": s.prefill_s + step / 1000,
                                 "tokens_per_target_call": s.tokens_per_target_call})
                    print(f"[long] fill {len(ids)} {kind} {name}: {rows[-1]['tokens_per_s']:.1f} tok/s, prefill "
                          f"{rows[-1]['prefill_tokens_per_s']:.0f} tok/s", file=sys.stderr)
                for row in rows[-len(results):]:  # the default against target-only on the same bundle
                    if row["method"] == "default" and "target-only" in results:
                        row["identical"] = results["default"] == results["target-only"]
    peer = [] if not peer else run_llama_bench(*peer, args.threads, fills, [512, 3000])
    result = {"date": time.strftime("%Y-%m-%d"), "threads": args.threads, "bundle": args.bundle.name,
              "short_bundle": args.short_bundle.name if args.short_bundle else None, "window": window,
              "max_new_tokens": args.max_new_tokens, "command": "benchmarks/long_context.py " + " ".join(sys.argv[1:]),
              "rows": rows, "memory": memory, "llama_cpp": peer}
    save_results(args.out, result, render)
    return 0


def render(r: dict) -> str:
    lines = [f"Long contexts on {r['bundle']} (window {r['window']}), ExecuTorch, greedy, {r['max_new_tokens']} new "
             f"tokens, {r['threads']} threads, {r['date']}; learned state empty at the start. Command: "
             f"`{r['command']}`.", "",
             "| fill | prompt | method | decode tok/s | tokens/target call | prefill tok/s | time to first token "
             "| identical |", "|---|---|---|---|---|---|---|---|"]
    for row in r["rows"]:
        same = {True: "yes", False: "NO"}.get(row.get("identical"), "")
        lines.append(f"| {row['fill']} | {row['kind']} | {row['method']} | {row['tokens_per_s']:.1f} | "
                     f"{row['tokens_per_target_call']:.2f} | {row['prefill_tokens_per_s']:.0f} | "
                     f"{row['time_to_first_token_s']:.2f} s | {same} |")
    lines += ["", "Resident memory of the process with only the target's program loaded, as its cache fills: " +
              ", ".join(f"{m['fill']} tokens {m['rss_mb']:.0f} MB" for m in r["memory"]) + "."]
    if r["llama_cpp"]:
        lines += ["", "llama.cpp b11434, Q8_0, `llama-bench -p 512,3000 -n 64 -d ...` (same threads):", "",
                  "| test | depth | tok/s |", "|---|---|---|"]
        for row in r["llama_cpp"]:
            test = f"tg{row['n_gen']}" if row["n_gen"] else f"pp{row['n_prompt']}"
            lines.append(f"| {test} | {row['n_depth']} | {row['tokens_per_s']:.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
