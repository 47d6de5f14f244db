"""How far cross-vocabulary speculative sampling moves the output law, on a setting small enough to enumerate.

A bigram target over {A, B, C, AB} and a bigram drafter over {A, B, C, BC}
(tests/helpers.py: letters_cross_pair): target "AB" is two draft tokens (an
n-gram merge once the cache has learnt it), draft "BC" has no target twin (a
split). For several random table pairs, the exact law of 3-token outputs is
enumerated and compared with the empirical law of `--runs` seeded generations,
default mode vs --strict-sampling. The noise floor is the mean total-variation
distance of `--runs` samples drawn from the exact law itself. Then, on the real
default pair (eager), what strict mode costs: acceptance and tokens per target
call at temperature 1 on `--real-prompts` prompts per domain, both modes on the
same prompts and seeds.

    .venv/bin/python benchmarks/sampling_tv.py --out benchmarks/results/sampling_tv
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(ROOT))
from common import save_results  # noqa: E402
from tests.helpers import chi_square_p, exact_distribution, letters_cross_pair, sample_law  # noqa: E402

N_TOKENS = 3


def tables(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A random target, and a drafter near it on the letters both vocabularies share (as in the test)."""
    rng = np.random.default_rng(seed)
    target = rng.normal(0, 1.5, size=(4, 4))
    draft = np.zeros((4, 4))
    draft[:3, :3] = target[:3, :3] + rng.normal(0, 1.0, size=(3, 3))
    draft[3] = draft[2]
    return target, draft


def total_variation(counts: dict, law: dict, runs: int) -> float:
    return 0.5 * sum(abs(counts.get(k, 0) / runs - p) for k, p in law.items())


def noise_floor(law: dict, runs: int, rng: np.random.Generator, draws: int = 50) -> float:
    keys = list(law)
    p = np.array([law[k] for k in keys])
    return float(np.mean([0.5 * np.abs(rng.multinomial(runs, p) / runs - p).sum() for _ in range(draws)]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--runs", type=int, default=20_000, help="generations per mode and table pair")
    ap.add_argument("--seeds", type=int, default=5, help="random table pairs")
    ap.add_argument("--draft-len", type=int, default=2)
    ap.add_argument("--real-prompts", type=int, default=2, help="real-pair prompts per domain (0: skip)")
    ap.add_argument("--real-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    result = {"command": " ".join(["benchmarks/sampling_tv.py", *sys.argv[1:]]), "runs": args.runs,
              "draft_len": args.draft_len, "tokens": N_TOKENS, "date": time.strftime("%Y-%m-%d"), "rows": []}
    rng = np.random.default_rng(0)
    for seed in range(args.seeds):
        target, draft = tables(seed)
        law = exact_distribution(target, 0, N_TOKENS)
        floor = noise_floor(law, args.runs, rng)
        for mode, strict in (("default", False), ("strict", True)):
            start = time.perf_counter()
            dec = letters_cross_pair(target, draft)  # a fresh, empty n-gram cache per mode
            counts, totals = sample_law(dec, [0], N_TOKENS, args.runs, draft_len=args.draft_len,
                                        strict_sampling=strict)
            row = {"seed": seed, "mode": mode, "tv": total_variation(counts, law, args.runs), "noise_floor": floor,
                   "chi_square_p": chi_square_p(counts, law, args.runs), "acceptance": totals["acceptance"],
                   "ngram_proposals_per_run": totals["ngram_cache_hits"] / args.runs}
            result["rows"].append(row)
            print(f"[seed {seed} {mode}] TV {row['tv']:.4f} (floor {floor:.4f}) acceptance {row['acceptance']:.3f} "
                  f"({time.perf_counter() - start:.0f}s)", file=sys.stderr, flush=True)
        save_results(args.out, result, render_table)
    if args.real_prompts:
        result["real_pair"] = real_pair_cost(args.real_prompts, args.real_tokens, args.threads)
        save_results(args.out, result, render_table)
    return 0


def real_pair_cost(per_domain: int, max_new_tokens: int, threads: int) -> list[dict]:
    """Acceptance and tokens per target call, default vs strict, on the real pair at temperature 1."""
    import torch

    from omnidraft import corpora
    from omnidraft.pair import build_eager_pair
    from omnidraft.runtime.decoding import GenerationConfig
    from omnidraft.runtime.ngram_cache import NGramCache
    from omnidraft.runtime.sampling import Sampler

    torch.set_num_threads(threads)
    pair = build_eager_pair(use_ngram_cache=False)
    dec = pair.decoder
    rows = []
    for mode, strict in (("default", False), ("strict", True)):
        pair.drafting.ngram_cache = NGramCache(pair.bridge.pair_id)  # fresh per mode: the same start for both
        totals = {"new_tokens": 0, "target_calls": 0, "accepted": 0, "drafted": 0}
        for domain in corpora.DOMAINS:
            chat = domain == "chat"
            for i, text in enumerate(corpora.prompts(domain, per_domain, split="eval")):
                config = GenerationConfig(max_new_tokens=max_new_tokens, sampler=Sampler(1.0), seed=i,
                                          eos_ids=pair.eos_ids(chat), strict_sampling=strict)
                stats = dec.generate(pair.encode_prompt(text, chat=chat), config).stats
                for name in totals:
                    totals[name] += getattr(stats, name)
                print(f"[real pair {mode} {domain} {i + 1}] acceptance {stats.acceptance_rate:.2f}",
                      file=sys.stderr, flush=True)
        rows.append({"mode": mode, "prompts": per_domain * len(corpora.DOMAINS),
                     "acceptance": totals["accepted"] / max(totals["drafted"], 1),
                     "tokens_per_target_call": totals["new_tokens"] / max(totals["target_calls"], 1)})
    return rows


def render_table(r: dict) -> str:
    lines = [
        f"Cross-vocabulary sampling on the enumerable letters pair: {r['tokens']}-token outputs, temperature 1, "
        f"draft length {r['draft_len']}, {r['runs']} generations per row, {r['date']}. TV = total-variation distance "
        "between the empirical and the exact target law; the noise floor is the TV of as many exact samples.",
        "",
        "| tables | mode | TV | noise floor | chi-square p | acceptance | n-gram proposals / generation |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in r["rows"]:
        lines.append(f"| {row['seed']} | {row['mode']} | {row['tv']:.4f} | {row['noise_floor']:.4f} | "
                     f"{row['chi_square_p']:.2g} | {row['acceptance']:.3f} | {row['ngram_proposals_per_run']:.2f} |")
    if r.get("real_pair"):
        lines += ["", "Real pair (smollm2-135m-instruct -> gemma-3-270m, eager), temperature 1, draft length 4, "
                      "same prompts and seeds:", "",
                  "| mode | prompts | acceptance | tokens / target call |", "|---|---|---|---|"]
        for row in r["real_pair"]:
            lines.append(f"| {row['mode']} | {row['prompts']} | {row['acceptance']:.3f} | "
                         f"{row['tokens_per_target_call']:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
