"""What a lookup costs with a large history: index build, query time per round, memory.

Fills a history with up to --tokens target tokens of real text (the corpora's adapt
split, tokenized by the target's tokenizer, in documents of a few hundred tokens),
then times `find_candidates` (what the hybrid policy runs every round) on the eval
split's texts, growing each sequence token by token as decoding would. Reports the
build time, the mean / median / p99 query time and the index's memory, for several
history sizes side by side.

    .venv/bin/python benchmarks/lookup_cost.py --out benchmarks/results/lookup_cost
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from omnidraft import corpora
from omnidraft.models import DEFAULT_TARGET, load_tokenizer
from omnidraft.catalog import resolve_model_path
from omnidraft.runtime.lookup import Doc, HistoryIndex, find_candidates
from omnidraft.runtime.vocab import Vocab

sys.path.insert(0, str(Path(__file__).parent))
from common import save_results  # noqa: E402


def documents(vocab: Vocab, tokens: int) -> list[np.ndarray]:
    """Real text in documents of about 300 tokens, cycling over the domains, until `tokens`."""
    docs, total, seed = [], 0, 0
    while total < tokens:
        for domain in corpora.DOMAINS + corpora.WORKLOADS:
            for item in corpora.workload(domain, 20, seed=seed, split="adapt", max_chars=1500):
                text = item if isinstance(item, str) else "\n".join(m["content"] for m in item)
                ids = np.asarray(vocab.tokenizer.encode(text, add_special_tokens=False), dtype=np.int32)
                docs.append(ids)
                total += len(ids)
        seed += 1
    return docs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--sizes", default="0,10000,100000,1000000", help="history sizes in tokens")
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--budget", type=int, default=15)
    args = ap.parse_args()
    vocab = Vocab.from_tokenizer(load_tokenizer(resolve_model_path(None, DEFAULT_TARGET)))
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"[lookup_cost] tokenizing up to {max(sizes):,} tokens of history ...", file=sys.stderr, flush=True)
    docs = documents(vocab, max(sizes))
    seqs = [vocab.tokenizer.encode(t, add_special_tokens=False) for d in corpora.DOMAINS
            for t in corpora.prompts(d, 20, split="eval", max_chars=1500)]
    rows = []
    for size in sizes:
        history = HistoryIndex(max_tokens=size)
        t0 = time.perf_counter()
        history.replace([Doc(d, i + 1, float(i)) for i, d in enumerate(_docs_up_to(docs, size))])
        build = time.perf_counter() - t0
        times, hits = [], 0
        for q in range(args.queries):
            seq = seqs[q % len(seqs)]
            cut = 8 + (q * 37) % max(len(seq) - 8, 1)
            t0 = time.perf_counter()
            c = find_candidates(seq[:cut], history if size else None, args.budget)
            times.append(time.perf_counter() - t0)
            hits += len(c) > 0
        ms = np.array(times) * 1000
        index_mb = (history._tokens.nbytes + history._keys.nbytes + history._ends.nbytes) / 2**20
        rows.append({"history_tokens": len(history), "build_s": build, "query_ms_mean": float(ms.mean()),
                     "query_ms_median": float(statistics.median(ms)), "query_ms_p99": float(np.percentile(ms, 99)),
                     "queries_with_candidates": hits / args.queries, "index_mb": index_mb})
        print(f"[lookup_cost] {rows[-1]}", file=sys.stderr, flush=True)
    save_results(args.out, {"command": " ".join(["benchmarks/lookup_cost.py", *sys.argv[1:]]),
                            "date": time.strftime("%Y-%m-%d"), "budget": args.budget, "rows": rows}, render)
    return 0


def _docs_up_to(docs, size):
    total = 0
    for d in docs:
        if total + len(d) > size:
            return
        total += len(d)
        yield d


def render(r: dict) -> str:
    lines = [f"Lookup cost per round (find_candidates, budget {r['budget']}, one thread, {r['date']}). "
             f"Command: `{r['command']}`.", "",
             "| history tokens | index build | query mean | median | p99 | queries with candidates | index memory |",
             "|---|---|---|---|---|---|---|"]
    for row in r["rows"]:
        lines.append(f"| {row['history_tokens']:,} | {row['build_s']:.2f} s | {row['query_ms_mean']:.3f} ms | "
                     f"{row['query_ms_median']:.3f} ms | {row['query_ms_p99']:.3f} ms | "
                     f"{100 * row['queries_with_candidates']:.0f}% | {row['index_mb']:.1f} MB |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
