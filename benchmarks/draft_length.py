"""Draft length on the default pair: fixed k, the Hugging Face heuristic, the acceptance head.

Per domain: a warm-up stream (the corpora's "adapt" split) teaches the n-gram
cache and the acceptance head (drafting with --draft-len auto); then every
method runs on the same held-out prompts ("eval" split), interleaved prompt by
prompt so that load drifts hit all methods alike, each from its own copy of the
warmed cache and head (the head keeps learning online, as in use). Greedy, one
process, fixed threads; every method's output must equal target-only's and the
table flags any that differ.

    .venv/bin/python benchmarks/draft_length.py --out benchmarks/results/draft_length
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

from omnidraft import corpora
from omnidraft.adaptation.predictor import AcceptancePredictor
from omnidraft.pair import build_bundle_pair, build_eager_pair
from omnidraft.runtime.acceptance import AcceptanceHead
from omnidraft.runtime.decoding import GenerationConfig, SpeculativeDecoder

sys.path.insert(0, str(Path(__file__).parent))
from common import Method, save_results  # noqa: E402


def methods(fixed: list[int], gammas: list[float], cap: int) -> dict[str, dict]:
    """name -> GenerationConfig draft fields (None: target-only)."""
    out = {"target-only": None}
    out.update({f"fixed k={k}": dict(draft_policy="fixed", draft_len=k) for k in fixed})
    out["heuristic +2/-1"] = dict(draft_policy="heuristic", draft_len=4, max_draft_len=cap)
    out.update({f"auto gamma={g}": dict(draft_policy="auto", max_draft_len=cap, gamma=g) for g in gammas})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--domains", default="code,prose,chat")
    ap.add_argument("--warmup", type=int, default=12, help="warm-up prompts per domain (adapt split)")
    ap.add_argument("--prompts", type=int, default=6, help="measured prompts per domain (eval split)")
    ap.add_argument("--max-new-tokens", type=int, default=40)
    ap.add_argument("--fixed", default="2,3,4,6,8")
    ap.add_argument("--gammas", default="0.3,0.5,0.7")
    ap.add_argument("--cap", type=int, default=8, help="longest draft of the adaptive methods")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--drafter", help="drafter checkpoint folder, small or smollm2-135m-instruct (default: as generate)")
    ap.add_argument("--bundle", type=Path, help="run an exported bundle (version 2: drafter graph with the head)")
    ap.add_argument("--backend", choices=("executorch", "onnxruntime"), default="executorch",
                    help="with --bundle")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import transformers

    transformers.utils.logging.disable_progress_bar()

    if args.bundle:
        pair = build_bundle_pair(args.bundle, args.backend, threads=args.threads, use_ngram_cache=False)
    else:
        pair = build_eager_pair(drafter=args.drafter, use_ngram_cache=False)
    backend = pair.decoder.target.backend
    drafter = pair.drafter
    table = methods([int(k) for k in args.fixed.split(",")], [float(g) for g in args.gammas.split(",")], args.cap)
    result = {"command": " ".join(["benchmarks/draft_length.py", *sys.argv[1:]]), "threads": args.threads,
              "date": time.strftime("%Y-%m-%d"), "warmup": args.warmup, "prompts": args.prompts,
              "max_new_tokens": args.max_new_tokens, "cap": args.cap, "target": pair.target_name,
              "drafter": pair.drafter_name, "backend": backend, "domains": {}}
    start = time.perf_counter()
    for domain in args.domains.split(","):
        chat = domain == "chat"
        eos = pair.eos_ids(chat)
        # warm-up: the cache and the head learn from this domain's traffic
        drafter.head = AcceptanceHead.initial(drafter.head.n_features)
        warm = SpeculativeDecoder.with_drafter(pair.decoder.target, pair.target_vocab, drafter,
                                               pair.bridge.draft, ngram_cache=True,
                                               predictor=AcceptancePredictor(drafter.head))
        for i, text in enumerate(corpora.prompts(domain, args.warmup, split="adapt")):
            s = warm.generate(pair.encode_prompt(text, chat=chat),
                              GenerationConfig(args.max_new_tokens, draft_policy="auto", max_draft_len=args.cap,
                                               eos_ids=eos)).stats
            print(f"[{domain} warm-up {i + 1}/{args.warmup}] acc {s.acceptance_rate:.2f} draft len "
                  f"{s.mean_draft_len:.1f} head loss {s.drafter.predictor['loss']:.3f} "
                  f"({time.perf_counter() - start:.0f}s)", file=sys.stderr, flush=True)
        runs = {name: Method(pair, draft, warm.proposer.ngram_cache, warm.proposer.predictor)
                for name, draft in table.items()}
        calibration = []  # (head probability, label) on the measured prompts, from the auto runs
        for i, text in enumerate(corpora.prompts(domain, args.prompts, split="eval")):
            ids = pair.encode_prompt(text, chat=chat)
            reference = None
            for name, method in runs.items():
                out = method.run(ids, args.max_new_tokens, eos)
                reference = out if reference is None else reference
                method.differ += out != reference
            print(f"[{domain} {i + 1}/{args.prompts}] " + " ".join(
                f"{n.split()[-1]}:{m.totals.tokens_per_s:.2f}"
                for n, m in runs.items()) + f" tok/s ({time.perf_counter() - start:.0f}s)", file=sys.stderr, flush=True)
        base_tps = runs["target-only"].totals.tokens_per_s
        for name, method in runs.items():
            if method.predictor is not None:
                prob, label = np.asarray(method.predictor.track).T
                calibration.append({"method": name, **_calibration(prob, label)})
        result["domains"][domain] = {
            "methods": {name: m.summary(base_tps) for name, m in runs.items()},
            "head": {"warmup_examples": warm.proposer.predictor.seen, "calibration": calibration},
        }
        save_results(args.out, result, render_table)  # partial results survive an interruption
    return 0


def _calibration(prob: np.ndarray, label: np.ndarray) -> dict:
    """How well the head separated accepted from rejected draft tokens, predicting before it learned of them."""
    hard = label >= 0.5
    pos, neg = prob[hard], prob[~hard]
    auc = float((pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()) \
        if len(pos) and len(neg) else None
    return {"examples": int(len(label)), "accept_rate": float(hard.mean()), "mean_prob": float(prob.mean()),
            "auc": auc, "brier": float(((prob - label) ** 2).mean())}


def render_table(r: dict) -> str:
    lines = [
        f"Draft length, {r['drafter']} -> {r['target']}, {r['backend']}, greedy, {r['max_new_tokens']} new tokens, "
        f"{r['threads']} threads, {r['date']}: {r['warmup']} warm-up prompts then {r['prompts']} measured prompts "
        f"per domain, all methods interleaved prompt by prompt; adaptive methods capped at {r['cap']}.",
        "",
        "| domain | method | tokens / target call | drafter calls / token | acceptance | mean draft len | "
        "tok/s | vs target-only |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for domain, d in r["domains"].items():
        for name, m in d["methods"].items():
            flag = f" ({m['outputs_differing']} outputs differ!)" if m["outputs_differing"] else ""
            acc = f"{m['acceptance_rate']:.3f}" if m["acceptance_rate"] is not None else "-"
            lines.append(f"| {domain} | {name}{flag} | {m['tokens_per_target_call']:.2f} | "
                         f"{m['drafter_calls_per_token']:.2f} | {acc} | {m['mean_draft_len']:.2f} | "
                         f"{m['tokens_per_s']:.2f} | {m['speedup']:.2f}x |")
    lines += ["", "The acceptance head's online track record on the measured prompts: its probability for each "
              "draft token, given before it learned that token's label (AUC: accepted vs rejected; Brier: mean "
              "squared error).", "",
              "| domain | method | examples | accepted | mean P(accept) | AUC | Brier |", "|---|---|---|---|---|---|---|"]
    for domain, d in r["domains"].items():
        for c in d["head"]["calibration"]:
            auc = f"{c['auc']:.3f}" if c["auc"] is not None else "-"
            lines.append(f"| {domain} | {c['method']} | {c['examples']} | {c['accept_rate']:.3f} | "
                         f"{c['mean_prob']:.3f} | {auc} | {c['brier']:.3f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
