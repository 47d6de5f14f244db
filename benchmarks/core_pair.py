"""Core benchmark: the default pair, greedy, three domains, speculative vs target-only.

For each prompt the target-only baseline and speculative decoding run back to
back in one process, on the same runners, with a fixed thread count, so that
their ratio is measured side by side. Writes results.json and table.md to --out.

    .venv/bin/python benchmarks/core_pair.py --out benchmarks/results/core_pair
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import torch

from omnidraft import corpora
from omnidraft.pair import build_eager_pair
from omnidraft.runtime.decoding import GenerationConfig
from omnidraft.runtime.ngram_cache import NGramCache

sys.path.insert(0, str(Path(__file__).parent))
from common import cost_ratio, save_results  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--prompts-per-domain", type=int, default=10)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--draft-len", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--drafter", help="drafter checkpoint folder, small or smollm2-135m-instruct (default: as generate)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    import transformers

    transformers.utils.logging.disable_progress_bar()
    pair = build_eager_pair(drafter=args.drafter, use_ngram_cache=False)
    dec = pair.decoder
    pair.drafting.ngram_cache = NGramCache(pair.bridge.pair_id)  # fresh: learns during this run only
    rows, per_prompt = [], []
    total = args.prompts_per_domain * len(corpora.DOMAINS)
    done = 0
    start = time.perf_counter()
    for domain in corpora.DOMAINS:
        agg = {k: 0.0 for k in ("tokens", "base_tokens", "base_s", "spec_s", "calls", "drafted", "accepted",
                                "hits", "hits_accepted", "draft_tokens", "mismatch")}
        chat = domain == "chat"
        for text in corpora.prompts(domain, args.prompts_per_domain, seed=args.seed, split="eval"):
            ids = pair.encode_prompt(text, chat=chat)
            eos = pair.eos_ids(chat)
            base = dec.generate(ids, GenerationConfig(args.max_new_tokens, speculative=False, eos_ids=eos))
            spec = dec.generate(ids, GenerationConfig(args.max_new_tokens, draft_len=args.draft_len, eos_ids=eos))
            s, b = spec.stats, base.stats
            same = spec.token_ids == base.token_ids
            agg["tokens"] += s.new_tokens
            agg["base_tokens"] += b.new_tokens
            agg["base_s"] += b.decode_s
            agg["spec_s"] += s.decode_s
            agg["calls"] += s.target_calls
            agg["drafted"] += s.drafted
            agg["accepted"] += s.accepted
            agg["hits"] += s.drafter.ngram_hits
            agg["hits_accepted"] += s.drafter.ngram_accepted
            agg["draft_tokens"] += s.drafter.draft_tokens
            agg["mismatch"] += 0 if same else 1
            per_prompt.append({"domain": domain, "prompt": text[:80], "identical": same,
                               "spec": {k: v for k, v in s.items() if k != "accepted_length_histogram"},
                               "base_tokens_per_s": b.tokens_per_s})
            done += 1
            elapsed = time.perf_counter() - start
            print(f"[{done}/{total}] {domain}: {s['tokens_per_target_call']:.2f} tok/call, "
                  f"acc {s['acceptance_rate']:.2f}, spec {s['tokens_per_s']:.1f} vs base {b['tokens_per_s']:.1f} tok/s"
                  f"{'' if same else '  OUTPUT DIFFERS'}  ({elapsed:.0f}s, eta {elapsed / done * (total - done):.0f}s)",
                  file=sys.stderr, flush=True)
        spec_tps = agg["tokens"] / agg["spec_s"]
        base_tps = agg["base_tokens"] / agg["base_s"]
        rows.append({
            "domain": domain,
            "prompts": args.prompts_per_domain,
            "tokens_per_target_call": agg["tokens"] / agg["calls"],
            "acceptance_rate": agg["accepted"] / max(agg["drafted"], 1),
            "ngram_cache_hits": int(agg["hits"]),
            "ngram_hits_accepted": int(agg["hits_accepted"]),
            "spec_tokens_per_s": spec_tps,
            "target_only_tokens_per_s": base_tps,
            "speedup": spec_tps / base_tps,
            "outputs_differing": int(agg["mismatch"]),
        })
    prefix = pair.encode_prompt(corpora.prompts("prose", 1, seed=9)[0])[:64]
    c = cost_ratio(dec.target, pair.drafter, prefix, pair.bridge.draft_prompt(prefix)[:64])[0]
    result = {
        "cost_ratio_c": c,
        "command": " ".join(["benchmarks/core_pair.py", *sys.argv[1:]]),
        "target": pair.target_name,
        "drafter": pair.drafter_name,
        "backend": dec.target.backend,
        "threads": torch.get_num_threads(),
        "draft_len": args.draft_len,
        "max_new_tokens": args.max_new_tokens,
        "temperature": 0.0,
        "vocab_intersection": pair.bridge.intersection_size,
        "drafter_vocab": len(pair.bridge.draft),
        "target_vocab": len(dec.target_vocab),
        "ngram_cache_size_at_end": len(pair.ngram_cache),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}",
        "date": time.strftime("%Y-%m-%d"),
        "rows": rows,
        "per_prompt": per_prompt,
    }
    save_results(args.out, result, render_table)
    return 0


def render_table(r: dict) -> str:
    lines = [
        f"Default pair {r['drafter']} -> {r['target']}, {r['backend']} fp32, greedy, {r['max_new_tokens']} new tokens, "
        f"draft length {r['draft_len']}, {r['threads']} threads, {r['date']}. Vocabulary intersection "
        f"{r['vocab_intersection']:,} of the drafter's {r['drafter_vocab']:,} tokens; n-gram cache "
        f"{r['ngram_cache_size_at_end']:,} entries at the end of the run. Measured cost ratio "
        f"c = drafter step / target step = {r.get('cost_ratio_c', float('nan')):.2f}.",
        "",
        "| domain | prompts | tokens / target call | acceptance | n-gram hits (accepted) | speculative tok/s | target-only tok/s | speedup | outputs differing |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in r["rows"]:
        lines.append(
            f"| {row['domain']} | {row['prompts']} | {row['tokens_per_target_call']:.2f} | {row['acceptance_rate']:.2f} | "
            f"{row['ngram_cache_hits']} ({row['ngram_hits_accepted']}) | {row['spec_tokens_per_s']:.2f} | "
            f"{row['target_only_tokens_per_s']:.2f} | {row['speedup']:.2f}x | {row['outputs_differing']} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
