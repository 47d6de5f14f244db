"""Would token trees pay? A replay study of lookup chains against lookup trees (issue 43), before building.

1. The target's own greedy continuation of each prompt (ExecuTorch target of --bundle), the workloads of
   the suite: open-ended (code, prose, chat; history warmed on the adapt split as the suite does) and
   first contact (empty history).
2. T(n), the target's call time for n tokens, measured on the same program now (interleaved, medians).
3. Replay, position by position, the decoding loop greedy lookup would run (lookup's queries and the loop's
   own time left out):
   - chain: lookup's continuation (its scorer learning as in use), the prefix k maximizing
     (1 + E_k) / T(k + 1) (the hybrid's rule), accepted = the longest prefix equal to the reference;
   - tree: the same walk branching at every step into the next tokens the occurrences disagree on
     (each branch scored by the same scorer on its own features), nodes added by path probability,
     the node count maximizing (1 + sum of path probabilities) / T(n + 1); accepted = the deepest node
     whose path equals the reference.
   Projected time = the sum of T(call size) over the rounds. A projection, not a measurement of a tree
   runtime: it assumes a tree call of n nodes costs what a chain call of n tokens costs.

    .venv/bin/python benchmarks/tree_study.py --bundle ~/.cache/omnidraft/bundles/et-8da8w-d8da4w --threads 2
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from omnidraft import corpora
from omnidraft.pair import PairOptions, open_pair
from omnidraft.runtime.choices import Backend
from omnidraft.runtime.decoding import GenerationConfig, SpeculativeDecoder
from omnidraft.runtime.lookup import MAX_MATCH, Candidates, HistoryIndex, find_candidates, match_in
from omnidraft.runtime.lookup_proposer import LookupScorer

sys.path.insert(0, str(Path(__file__).parent))
from common import save_results  # noqa: E402
from suite import encode, is_chat  # noqa: E402


def reference(pair, ids, eos, max_new) -> list[int]:
    dec = SpeculativeDecoder(pair.decoder.target, pair.target_vocab, None)
    return dec.generate(ids, GenerationConfig(max_new, eos_ids=eos, speculative=False)).token_ids


def call_costs(runner, prefix, sizes, repeats) -> dict[int, float]:
    runner.reset()
    runner.forward(prefix, 0)
    start = len(prefix)
    times = {n: [] for n in sizes}
    for _ in range(repeats):
        for n in sizes:
            runner.rollback(start)
            t0 = time.perf_counter()
            runner.forward(list(prefix[:n]), start, n)
            times[n].append(time.perf_counter() - t0)
    return {n: statistics.median(v) for n, v in times.items()}


def sources(seq, history, wide: bool):
    """Occurrence sets to walk: the longest match (as find_candidates), and with `wide` also the other
    source's longest match and the last token's occurrences in the context (a one-token backoff)."""
    suffix = np.asarray(seq[-MAX_MATCH:], dtype=np.int32)
    context = np.asarray(seq, dtype=np.int32)
    ends, length = match_in(context, suffix)
    found = [(context, ends, length, "context")] if length else []
    if history is not None:
        h_tokens, h_ends, h_length = history.match(suffix)
        if h_length:
            found.append((h_tokens, h_ends, h_length, "history"))
    found.sort(key=lambda f: -f[2])
    if not wide:
        return found[:1]
    last = np.flatnonzero(context[:-1] == context[-1])
    if len(last):
        found.append((context, last[-256:], 1, "context"))
    return found


def lookup_tree(seq, history, scorer, max_nodes, branch, wide=False):
    """Nodes (parent, token, path probability), best first, so every prefix of the list is a tree
    (a child's path probability is below its parent's); parents index the list, -1 the root.
    A branching walk of each occurrence set, merged as a trie (a path's probability: its best)."""
    if len(seq) < 2:
        return []
    trie = {}  # path tuple -> path prob
    for tokens, ends, match, source in sources(seq, history, wide):
        n = len(tokens)
        frontier = [(1.0, (), ends, 0)]
        made = 0
        while frontier and made < max_nodes:
            frontier.sort(key=lambda f: -f[0])
            prob, path, ends, depth = frontier.pop(0)
            ends = ends[ends + 1 < n] + 1
            nxt = tokens[ends]
            keep = nxt >= 0
            ends, nxt = ends[keep], nxt[keep]
            if not len(ends):
                continue
            values, inverse, counts = np.unique(nxt, return_inverse=True, return_counts=True)
            for choice in np.argsort(-counts, kind="stable")[:branch]:
                c = Candidates([int(values[choice])], [float(counts[choice]) / len(nxt)], [len(nxt)], match, source)
                x = scorer.features(c)
                x[0, 4] = depth / 16.0
                p = prob * float(scorer.probs(x)[0])
                key = path + (int(values[choice]),)
                trie[key] = max(trie.get(key, 0.0), p)
                made += 1
                frontier.append((p, key, ends[inverse == choice], depth + 1))
                if made >= max_nodes:
                    break
    index = {}
    nodes = []
    for path in sorted(trie, key=lambda k: (-trie[k], len(k)))[:max_nodes]:
        if len(path) > 1 and path[:-1] not in index:
            continue  # its parent fell out of the budget
        index[path] = len(nodes)
        nodes.append((index.get(path[:-1], -1), path[-1], trie[path]))
    return nodes


def best_size(path_probs, T) -> int:
    best, value = 0, 1.0 / T(1)
    total = 0.0
    for i, p in enumerate(path_probs):
        total += p
        v = (1 + total) / T(i + 2)
        if v > value:
            best, value = i + 1, v
    return best


def replay(prompt, ref, history, scorer, T, tree, max_nodes: int, branch: int, wide=False):
    """Projected seconds of greedy lookup decoding of `ref` after `prompt`."""
    seq, out = list(prompt), list(ref)
    seconds, pos = 0.0, 0
    while pos < len(out):
        c = find_candidates(seq, history, 16)
        k_chain = best_size(np.cumprod(scorer.probs(scorer.features(c))), T) if len(c) else 0
        k = cost_k = k_chain
        if tree:
            nodes = lookup_tree(seq, history, scorer, max_nodes, branch, wide)
            k = cost_k = best_size([p for _, _, p in nodes], T)
            if tree == "bound":  # every node verified for the price of the chain's call
                k = len(nodes)
                cost_k = k_chain
            node, acc = -1, 0
            while pos + acc < len(out):  # the deepest path equal to the reference
                nxt = [i for i, (par, tok, _) in enumerate(nodes[:k]) if par == node and tok == out[pos + acc]]
                if not nxt:
                    break
                node, acc = nxt[0], acc + 1
        else:
            acc = 0
            while acc < k and pos + acc < len(out) and c.tokens[acc] == out[pos + acc]:
                acc += 1
        if len(c):  # the scorer learns from lookup's continuation, as in use
            labels = []
            for j, t in enumerate(c.tokens):
                if pos + j >= len(out):
                    break
                labels.append(float(out[pos + j] == t))
                if not labels[-1]:
                    break
            scorer.learn(scorer.features(c)[: len(labels)], np.array(labels))
        commit = min(acc + 1, len(out) - pos)
        seq += out[pos : pos + commit]
        pos += commit
        seconds += T(cost_k + 1)
    return seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/tree_study"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pair = open_pair(PairOptions(bundle=args.bundle, backend=Backend.EXECUTORCH, speculative=False,
                                 threads=args.threads, private=True))
    target = pair.decoder.target
    sizes = list(range(1, args.nodes + 2))
    prefix = pair.encode_prompt(corpora.prompts("prose", 1, seed=9)[0])[:64]
    cost = call_costs(target, prefix, sizes, 5)
    print("T(n) ms: " + " ".join(f"{n}:{cost[n] * 1e3:.1f}" for n in sizes), file=sys.stderr)

    def T(n):
        return cost[min(n, max(sizes))]

    def continued(workload, n, split):
        """(prompt ids, the target's greedy continuation) of the workload's prompts that fit the context."""
        out = []
        for item in corpora.workload(workload, n, 0, split):
            ids = encode(pair, item, workload)
            if len(ids) + args.max_new_tokens + 1 < target.max_context:
                out.append((ids, reference(pair, ids, pair.eos_ids(is_chat(item, workload)), args.max_new_tokens)))
        return out

    results = {"T_ms": {n: cost[n] * 1e3 for n in sizes}, "workloads": {}}
    for workload in ("code", "prose", "chat", "first-contact", "code-infile", "structured", "multiturn"):
        history = HistoryIndex()
        if workload != "first-contact":
            for ids, ref in continued(workload, args.warmup, "adapt"):
                history.add(ids + ref)
        texts = continued(workload, args.prompts, "eval")
        row = {}
        for name, tree, branch in (("target-only", None, 0), ("chain", False, 1), ("tree", True, 2), ("wide tree", True, 2),
                                   ("tree bound", "bound", 3), ("wide tree bound", "bound", 3)):
            total_s, total_tok, worst = 0.0, 0, math.inf
            hist = _copy(history)
            scorer = LookupScorer()
            for ids, ref in texts:
                scorer.begin()
                if tree is None:
                    s = T(1) * len(ref)
                else:
                    s = replay(ids, ref, hist if workload != "first-contact" else None, scorer, T, tree,
                                  args.nodes, branch, wide=name.startswith("wide"))
                base = T(1) * len(ref)
                worst = min(worst, base / s)
                total_s += s
                total_tok += len(ref)
                if workload != "first-contact":
                    hist.add(ids + ref)
            row[name] = {"tok_s": total_tok / total_s, "worst": worst}
        base = row["target-only"]["tok_s"]
        print(workload + ": " + ", ".join(f"{k} {v['tok_s'] / base:.2f}x (worst {v['worst']:.2f})"
                                          for k, v in row.items()), file=sys.stderr)
        results["workloads"][workload] = row
    results["command"] = "benchmarks/tree_study.py " + " ".join(sys.argv[1:])
    results["date"] = time.strftime("%Y-%m-%d")
    results["threads"] = args.threads
    save_results(args.out, results, render)


def render(r) -> str:
    names = list(next(iter(r["workloads"].values())))[1:]
    lines = [f"Token trees, a replay projection (not a measurement of a tree runtime): lookup chains against lookup "
             f"trees on the target's own greedy continuations, ExecuTorch target T(n) measured in the same run, "
             f"{r['threads']} threads, {r['date']}. Command: `{r['command']}`.", "",
             "T(n) ms: " + ", ".join(f"{n}: {t:.1f}" for n, t in r["T_ms"].items()), "",
             "| workload | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for workload, row in r["workloads"].items():
        base = row["target-only"]["tok_s"]
        lines.append(f"| {workload} | " + " | ".join(f"{row[n]['tok_s'] / base:.2f}x (worst {row[n]['worst']:.2f}x)"
                                                  for n in names) + " |")
    lines += ["", "Ratios are projected tokens per second over target-only's, T(1) per token. chain: lookup's "
              "continuation, the prefix the hybrid's rule picks; tree: the walk branching into the two most "
              "frequent next tokens at every step, nodes by path probability (the lookup scorer's), the size "
              "maximizing expected tokens per second; wide: also the other source's longest match and the last "
              "token's occurrences in the context, merged as a trie; bound: every node of a 16-node tree "
              "(three branches per step) verified for the price of the chain's call, an upper bound on what "
              "these candidates can give.", ""]
    return "\n".join(lines)


def _copy(history):
    h = HistoryIndex(history.max_tokens)
    h.replace(list(history.docs))
    return h


if __name__ == "__main__":
    main()
