"""Peer benchmark: this project vs Hugging Face assisted generation, same pair, same prompts.

Side by side in one process, fixed threads, greedy, per prompt:
  1. target-only through our eager runner (the baseline every ratio is taken against);
  2. Hugging Face `generate()` target-only (greedy);
  3. Hugging Face assisted generation with a different tokenizer
     (`generate(assistant_model=..., tokenizer=..., assistant_tokenizer=...)`);
  4. OmniDraft speculative decoding, eager, n-gram cache learning during the run;
  5. the same without the n-gram cache (direct mapping and splits only).
Every method's greedy output is compared with the baseline's; the table flags
differences. The analytic ceiling uses the measured per-token acceptance alpha
and cost ratio c: (1 - a^(k+1)) / ((1 - a)(k c + 1)).

    .venv/bin/python benchmarks/peers.py --out benchmarks/results/peers
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from omnidraft import corpora
from omnidraft.pair import build_eager_pair
from omnidraft.runtime.decoding import GenerationConfig
from omnidraft.runtime.ngram_cache import NGramCache

sys.path.insert(0, str(Path(__file__).parent))
from common import ceiling, cost_ratio, hf_generate, save_results  # noqa: E402

METHODS = ["target-only (ours)", "HF generate", "HF assisted", "OmniDraft eager", "OmniDraft eager, no n-gram cache"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--prompts-per-domain", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--draft-len", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    pair = build_eager_pair(use_ngram_cache=False)
    dec = pair.decoder
    hf_target, hf_drafter = dec.target.model, pair.drafter.model
    tok_t, tok_d = pair.target_vocab.tokenizer, pair.bridge.draft.tokenizer
    cache = NGramCache(pair.bridge.pair_id)
    prompts = [(d, t) for d in corpora.DOMAINS for t in corpora.prompts(d, args.prompts_per_domain, seed=2, split="eval")]

    totals = {m: {"tokens": 0, "s": 0.0, "calls": 0, "drafted": 0, "accepted": 0, "differ": 0} for m in METHODS}
    for i, (domain, text) in enumerate(prompts, 1):
        chat = domain == "chat"
        ids = pair.encode_prompt(text, chat=chat)
        eos = pair.eos_ids(chat)
        base = dec.generate(ids, GenerationConfig(args.max_new_tokens, speculative=False, eos_ids=eos))
        runs = {"target-only (ours)": (base.token_ids, base.stats.decode_s, base.stats)}
        runs["HF generate"] = (*hf_generate(hf_target, ids, eos, args.max_new_tokens), None)
        runs["HF assisted"] = (*hf_generate(hf_target, ids, eos, args.max_new_tokens, assistant_model=hf_drafter,
                                            tokenizer=tok_t, assistant_tokenizer=tok_d), None)
        for name, use_cache in (("OmniDraft eager", True), ("OmniDraft eager, no n-gram cache", False)):
            pair.drafting.ngram_cache = cache if use_cache else None
            r = dec.generate(ids, GenerationConfig(args.max_new_tokens, draft_len=args.draft_len, eos_ids=eos))
            runs[name] = (r.token_ids, r.stats.decode_s, r.stats)
        for name, (tokens, secs, stats) in runs.items():
            agg = totals[name]
            agg["tokens"] += len(tokens)
            agg["s"] += secs
            agg["differ"] += tokens != base.token_ids
            if stats:
                agg["calls"] += stats.target_calls
                agg["drafted"] += stats.drafted
                agg["accepted"] += stats.accepted
        print(f"[{i}/{len(prompts)}] {domain}: " + ", ".join(
            f"{n.split(' (')[0]} {len(tk) / s:.1f}" for n, (tk, s, _) in runs.items()) + " tok/s",
            file=sys.stderr, flush=True)

    prefix = pair.encode_prompt(prompts[0][1])[:64]
    c = cost_ratio(dec.target, pair.drafter, prefix, pair.bridge.draft_prompt(prefix)[:64])[0]
    base_tps = totals[METHODS[0]]["tokens"] / totals[METHODS[0]]["s"]
    rows = []
    for name in METHODS:
        agg = totals[name]
        tps = agg["tokens"] / agg["s"]
        row = {"method": name, "tokens_per_s": tps, "speedup": tps / base_tps, "outputs_differing": agg["differ"]}
        if agg["drafted"]:
            alpha = agg["accepted"] / max(agg["drafted"], 1)
            row.update(tokens_per_target_call=agg["tokens"] / agg["calls"], acceptance_rate=alpha,
                       ceiling=ceiling(alpha, args.draft_len, c))
        rows.append(row)
    result = {"command": " ".join(["benchmarks/peers.py", *sys.argv[1:]]), "threads": args.threads, "cost_ratio_c": c,
              "draft_len": args.draft_len, "max_new_tokens": args.max_new_tokens, "prompts": len(prompts),
              "date": time.strftime("%Y-%m-%d"), "rows": rows}
    save_results(args.out, result, render)
    return 0


def render(r: dict) -> str:
    lines = [
        f"{r['prompts']} prompts (code, prose, chat), greedy, {r['max_new_tokens']} new tokens, draft length "
        f"{r['draft_len']}, {r['threads']} threads, eager fp32, {r['date']}; measured cost ratio c = {r['cost_ratio_c']:.2f}.",
        "",
        "| method | tok/s | vs target-only | tokens / target call | acceptance | analytic ceiling | outputs differing |",
        "|---|---|---|---|---|---|---|",
    ]
    for x in r["rows"]:
        extra = (f"{x['tokens_per_target_call']:.2f} | {x['acceptance_rate']:.2f} | {x['ceiling']:.2f}x"
                 if "ceiling" in x else "- | - | -")
        lines.append(f"| {x['method']} | {x['tokens_per_s']:.2f} | {x['speedup']:.2f}x | {extra} | {x['outputs_differing']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
