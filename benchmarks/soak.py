"""Soak: many consecutive generations with online adaptation in one process.

Runs `--generations` prompts (cycling through the three domains' "adapt" splits)
through one decoder with the n-gram cache, LoRA adaptation and the acceptance
head all learning, and reports per window: resident memory, n-gram cache size,
adapter updates and rollbacks, acceptance on the window's own traffic, and
acceptance on a fixed probe set of held-out prompts ("eval" split) measured with
learning paused. The same probe set measured before any learning (fresh cache,
pretrained drafter, initial head) is the no-adaptation baseline, so every window
is compared with it on the same prompts. Checks, written into the result: memory
flat within 5% from the first window's end to the last, and probe acceptance
below the baseline in at most one window.

    .venv/bin/python benchmarks/soak.py --out benchmarks/results/soak --generations 1000   # long variant
"""

from __future__ import annotations

import argparse
import copy
import gc
import sys
import time
from pathlib import Path

import torch

from omnidraft import corpora
from omnidraft.adaptation.online import AdaptConfig, OnlineAdapter
from omnidraft.adaptation.predictor import AcceptancePredictor
from omnidraft.pair import build_eager_pair
from omnidraft.runtime.decoding import GenerationConfig, SpeculativeDecoder
from omnidraft.runtime.drafting import DraftModel
from omnidraft.runtime.ngram_cache import NGramCache
from omnidraft.simulator import peak_rss_mb, rss_mb

sys.path.insert(0, str(Path(__file__).parent))
from common import save_results  # noqa: E402


def prompt_cycle(n: int) -> list[tuple[str, str]]:
    per_domain = max(1, -(-n // len(corpora.DOMAINS)))
    pools = {d: corpora.prompts(d, per_domain, split="adapt") for d in corpora.DOMAINS}
    out = []
    for i in range(n):
        domain = corpora.DOMAINS[i % len(corpora.DOMAINS)]
        pool = pools[domain]
        out.append((domain, pool[(i // len(corpora.DOMAINS)) % len(pool)]))
    return out


def probe(dec, pair, prompts, config) -> float:
    """Acceptance on `prompts` with learning paused: the cache learns on a copy, no LoRA or head updates."""
    paused = SpeculativeDecoder.with_drafter(dec.target, pair.target_vocab, dec.proposer.drafter, dec.proposer.bridge.draft,
                                             ngram_cache=copy.deepcopy(dec.proposer.ngram_cache))
    drafted = accepted = 0
    for domain, text in prompts:
        s = paused.generate(pair.encode_prompt(text, chat=domain == "chat"), config).stats
        drafted += s.drafted
        accepted += s.accepted
    return accepted / max(drafted, 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--generations", type=int, default=1000)
    ap.add_argument("--window", type=int, default=50)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--probe", type=int, default=2, help="held-out probe prompts per domain")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--target", help="target checkpoint folder (default: Gemma-3-270M)")
    ap.add_argument("--drafter", help="drafter checkpoint folder, small or smollm2-135m-instruct (default: as generate)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pair = build_eager_pair(args.target, args.drafter, use_ngram_cache=False)
    target, drafter, bridge = pair.decoder.target, pair.drafter, pair.bridge
    prompts = prompt_cycle(args.generations)
    config = GenerationConfig(args.max_new_tokens, draft_policy="auto", max_draft_len=6)

    probes = [(d, t) for d in corpora.DOMAINS for t in corpora.prompts(d, args.probe, split="eval")]
    cache = NGramCache(bridge.pair_id)  # fresh and never saved: the soak starts from nothing learned
    base = SpeculativeDecoder(target, pair.target_vocab, DraftModel(drafter, bridge, cache))
    baseline = probe(base, pair, probes, config)  # before any learning
    drafting = DraftModel(drafter, bridge, cache, AcceptancePredictor(drafter.head))
    dec = SpeculativeDecoder(target, pair.target_vocab, drafting,
                             OnlineAdapter(drafter.model, bridge, AdaptConfig(lr=3e-4)))
    result = {"command": " ".join(["benchmarks/soak.py", *sys.argv[1:]]), "date": time.strftime("%Y-%m-%d"),
              "threads": args.threads, "generations": args.generations, "window": args.window,
              "max_new_tokens": args.max_new_tokens, "target": pair.target_name, "drafter": pair.drafter_name,
              "probe_prompts": len(probes), "baseline_acceptance": baseline, "windows": []}
    start = time.perf_counter()
    drafted = accepted = 0
    for i, (domain, text) in enumerate(prompts):
        s = dec.generate(pair.encode_prompt(text, chat=domain == "chat"), config).stats
        drafted += s.drafted
        accepted += s.accepted
        if (i + 1) % args.window == 0 or i + 1 == len(prompts):
            gc.collect()
            a = dec.adapter.stats
            probe_acceptance = probe(dec, pair, probes, config)
            # Measured after the probe's decoding: the drafter's merged LoRA weights always exist then (a
            # rollback drops them until the next decode, which would show as a 0.7 GB dip).
            w = {"generations": i + 1, "rss_mb": rss_mb(), "peak_rss_mb": peak_rss_mb(),
                 "ngram_cache": len(dec.proposer.ngram_cache), "updates": a.updates, "rollbacks": a.rollbacks,
                 "acceptance_rate": accepted / max(drafted, 1), "probe_acceptance": probe_acceptance,
                 "head_updates": dec.proposer.predictor.updates, "seconds": time.perf_counter() - start}
            result["windows"].append(w)
            drafted = accepted = 0
            print(f"[{i + 1}/{len(prompts)}] RSS {w['rss_mb']:.0f} MB (peak {w['peak_rss_mb']:.0f}), cache {w['ngram_cache']}, updates "
                  f"{w['updates']} ({w['rollbacks']} rolled back), acceptance {w['acceptance_rate']:.3f}, probe "
                  f"{w['probe_acceptance']:.3f} (baseline {baseline:.3f}) "
                  f"({w['seconds']:.0f}s)", file=sys.stderr, flush=True)
            save_results(args.out, checked(result), render_table)
    return 0 if result["memory_flat"] and result["acceptance_ok"] else 1


def checked(result: dict) -> dict:
    """Memory flat within 5% (first window's end to the last), probe acceptance under baseline in at most one window."""
    w = result["windows"]
    growth = (w[-1]["rss_mb"] - w[0]["rss_mb"]) / w[0]["rss_mb"]
    below = sum(x["probe_acceptance"] < result["baseline_acceptance"] for x in w)
    result.update(rss_growth=growth, memory_flat=growth <= 0.05, windows_below_baseline=below,
                  acceptance_ok=below <= 1)
    return result


def render_table(r: dict) -> str:
    lines = [f"Soak, {r['drafter']} -> {r['target']}, eager, greedy, auto draft length, {r['generations']} "
             f"generations of {r['max_new_tokens']} tokens with LoRA adaptation, n-gram cache and acceptance head "
             f"learning, {r['threads']} threads, {r['date']}. Probe: {r['probe_prompts']} held-out prompts measured "
             f"after every window with learning paused; no-adaptation baseline on them: "
             f"{r['baseline_acceptance']:.3f}.", "",
             "| generations | RSS MB | peak RSS MB | n-gram cache | LoRA updates (rolled back) | head updates | "
             "acceptance (window) | acceptance (probe) | seconds |",
             "|---|---|---|---|---|---|---|---|---|"]
    for w in r["windows"]:
        lines.append(f"| {w['generations']} | {w['rss_mb']:.0f} | {w['peak_rss_mb']:.0f} | {w['ngram_cache']} | "
                     f"{w['updates']} ({w['rollbacks']}) | "
                     f"{w['head_updates']} | {w['acceptance_rate']:.3f} | {w['probe_acceptance']:.3f} | "
                     f"{w['seconds']:.0f} |")
    lines += ["", f"RSS growth from the first window to the last: {100 * r['rss_growth']:+.1f}% "
              f"({'flat' if r['memory_flat'] else 'NOT flat'} within 5%); windows with probe acceptance below the "
              f"baseline: {r['windows_below_baseline']} ({'ok' if r['acceptance_ok'] else 'more than one'})."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
