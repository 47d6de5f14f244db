"""The lookup scorer's starting weights, chosen by measurement.

Decodes the corpora's prompts (every domain and workload) greedily with the target alone,
then replays each generation as lookup would have seen it: at every position, the
continuation lookup offers (the text so far, and the earlier generations as history) and
which of its tokens the target really produced next (up to the first miss). A logistic
regression on the adapt split's rounds gives the prior; the eval split's rounds judge it
(log loss and calibration) against the previous prior. Writes results.json and table.md.

    .venv/bin/python benchmarks/lookup_prior.py --out benchmarks/results/lookup_prior
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

from omnidraft import corpora
from omnidraft.pair import build_eager_pair
from omnidraft.runtime.decoding import GenerationConfig
from omnidraft.runtime.lookup import HistoryIndex, find_candidates
from omnidraft.runtime.lookup_proposer import PRIOR, LookupScorer

sys.path.insert(0, str(Path(__file__).parent))
from common import save_results  # noqa: E402


def rounds(pair, split: str, per_workload: int, max_new: int, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """(features, labels) of every lookup token judged against the target's own greedy continuation."""
    xs, ys = [], []
    for workload in corpora.DOMAINS + corpora.WORKLOADS:
        history = HistoryIndex()
        for item in corpora.workload(workload, per_workload, split=split):
            ids = pair.encode_chat(item) if isinstance(item, list) else pair.encode_prompt(item, chat=workload == "chat")
            if len(ids) + max_new + 1 >= pair.decoder.target.max_context:
                continue
            chat = isinstance(item, list) or workload == "chat"
            out = pair.decoder.generate(ids, GenerationConfig(max_new, speculative=False, eos_ids=pair.eos_ids(chat)))
            seq = ids + out.token_ids
            for pos in range(len(ids), len(seq)):
                c = find_candidates(seq[:pos], history, budget)
                if not len(c):
                    continue
                x = LookupScorer.features(c)
                for j, t in enumerate(c.tokens):
                    if pos + j >= len(seq):
                        break
                    xs.append(x[j])
                    ys.append(float(seq[pos + j] == t))
                    if not ys[-1]:
                        break
            history.add(seq)
            print(f"[{split} {workload}] {len(ys)} judged tokens", file=sys.stderr, flush=True)
    return np.array(xs), np.array(ys)


def log_loss(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    p = np.clip(1 / (1 + np.exp(-(x @ w))), 1e-6, 1 - 1e-6)
    return float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean())


def fit(x: np.ndarray, y: np.ndarray, l2: float = 1e-3, steps: int = 3000) -> np.ndarray:
    """Logistic regression by full-batch Newton-free gradient descent with Adam (small, deterministic)."""
    w = np.zeros(x.shape[1])
    m = v = np.zeros_like(w)
    for t in range(1, steps + 1):
        p = 1 / (1 + np.exp(-(x @ w)))
        g = x.T @ (p - y) / len(y) + l2 * w
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        w = w - 0.05 * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
    return w


def calibration(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> list[dict]:
    p = 1 / (1 + np.exp(-(x @ w)))
    out = []
    for lo in np.arange(0, 1, 0.2):
        sel = (p >= lo) & (p < lo + 0.2)
        if sel.any():
            out.append({"bin": f"{lo:.1f}-{lo + 0.2:.1f}", "n": int(sel.sum()), "predicted": float(p[sel].mean()),
                        "observed": float(y[sel].mean())})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--prompts", type=int, default=8, help="prompts per domain and workload, per split")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pair = build_eager_pair(speculative=False)
    x_fit, y_fit = rounds(pair, "adapt", args.prompts, args.max_new_tokens, args.budget)
    x_eval, y_eval = rounds(pair, "eval", args.prompts, args.max_new_tokens, args.budget)
    w = fit(x_fit, y_fit)
    result = {"command": " ".join(["benchmarks/lookup_prior.py", *sys.argv[1:]]), "date": time.strftime("%Y-%m-%d"),
              "target": pair.target_name, "judged_fit": len(y_fit), "judged_eval": len(y_eval),
              "accept_rate_eval": float(y_eval.mean()), "fitted": w.tolist(), "previous": PRIOR.tolist(),
              "log_loss_eval": {"previous": log_loss(PRIOR, x_eval, y_eval), "fitted": log_loss(w, x_eval, y_eval)},
              "calibration_eval": {"previous": calibration(PRIOR, x_eval, y_eval),
                                   "fitted": calibration(w, x_eval, y_eval)}}
    save_results(args.out, result, render)
    return 0


def render(r: dict) -> str:
    lines = [f"Lookup scorer prior, {r['target']} greedy, {r['date']}: {r['judged_fit']:,} judged lookup tokens to fit "
             f"(adapt split), {r['judged_eval']:,} to judge (eval split; {100 * r['accept_rate_eval']:.0f}% accepted). "
             f"Command: `{r['command']}`.", "",
             f"Held-out log loss: previous prior {r['log_loss_eval']['previous']:.3f}, "
             f"fitted {r['log_loss_eval']['fitted']:.3f}. Fitted weights: "
             f"{', '.join(f'{w:.3f}' for w in r['fitted'])}.", "",
             "| predicted P | tokens | previous: predicted / observed | fitted: predicted / observed |", "|---|---|---|---|"]
    prev = {c["bin"]: c for c in r["calibration_eval"]["previous"]}
    for c in r["calibration_eval"]["fitted"]:
        p = prev.get(c["bin"])
        before = f"{p['predicted']:.2f} / {p['observed']:.2f}" if p else "-"
        lines.append(f"| {c['bin']} | {c['n']} | {before} | {c['predicted']:.2f} / {c['observed']:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
