"""Which adaptation settings pay on a domain the shipped drafter never saw: a replayed study.

Under greedy decoding what the adapter learns from does not depend on the drafter (the target
decides every committed token, and its rows at those positions are the same whoever proposed),
so a stream can be decoded once and replayed into any number of adapter settings exactly as
`omnidraft adapt` would feed them, one generation at a time, with the same schedule, buffer and
guard. Held-out prompts of the same domain (another split: other packages, files or lines) measure
the drafter before and after: the teacher-forced greedy acceptance per target token (the share of
the target's greedy continuation the drafter would have drafted, as the guard measures it), per
prompt, so that the gain gets a paired 90% interval from resampling the held-out prompts.
Each setting starts from the same pretrained drafter and the same LoRA draw. Reports the gain,
the seconds spent updating (guard included) and the gain per second of training.

    .venv/bin/python benchmarks/adapt_study.py --out benchmarks/results/adapt_study --domain docs
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from omnidraft import corpora
from omnidraft.adaptation.examples import ExampleBuilder, Mapping
from omnidraft.adaptation.lora import LoRAConfig
from omnidraft.adaptation.online import AdaptConfig, OnlineAdapter
from omnidraft.models import load_model, load_vocab, resolve_pair_paths
from omnidraft.runtime.bridge import VocabBridge
from omnidraft.runtime.decoding import GenerationConfig, SpeculativeDecoder
from omnidraft.runtime.runner import EagerRunner

sys.path.insert(0, str(Path(__file__).parent))
from common import save_results  # noqa: E402

ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")


def settings(base: AdaptConfig) -> dict[str, AdaptConfig]:
    """The settings compared: the defaults, then one knob moved at a time."""
    lora = base.lora
    return {
        "default": base,
        "lr 1e-3": replace(base, lr=1e-3),
        "lr 3e-3": replace(base, lr=3e-3),
        "steps 4": replace(base, steps=4),
        "steps 8": replace(base, steps=8),
        "batch 4": replace(base, batch=4),
        "rank 8": replace(base, lora=replace(lora, rank=8, alpha=16.0)),
        "rank 64": replace(base, lora=replace(lora, rank=64, alpha=128.0)),
        "attention only": replace(base, lora=replace(lora, targets=ATTN)),
        "mlp only": replace(base, lora=replace(lora, targets=MLP)),
        "no guard": replace(base, guard=False),
        "guard 8 held out": replace(base, holdout=8),
        "every 2": replace(base, every=2),
    }


def decode_examples(target, target_vocab, bridge, mapping, texts, max_new: int, eos, label: str) -> list:
    """Each prompt's greedy continuation by the target, as the adapter's example (the target's rows at every
    committed position: what verification would have given it)."""
    dec = SpeculativeDecoder(target, target_vocab)
    out = []
    t0 = time.perf_counter()
    for i, text in enumerate(texts):
        ids = target_vocab.tokenizer.encode(text, add_special_tokens=True)
        cont = dec.generate(ids, GenerationConfig(max_new, speculative=False, eos_ids=eos)).token_ids
        if not cont:
            continue
        seq = ids + cont
        target.reset()
        rows = target.forward(seq[:-1], 0, len(cont))  # row i scores cont[i]
        builder = ExampleBuilder(bridge, mapping, bridge.draft_prompt(ids))
        builder.add(cont, rows)
        example = builder.build()
        if example is not None:
            out.append(example)
        print(f"[{label}] {i + 1}/{len(texts)} decoded ({time.perf_counter() - t0:.0f}s)", file=sys.stderr, flush=True)
    return out


def per_example_acceptance(learner, examples) -> np.ndarray:
    return np.array([learner.acceptance([e]) for e in examples])


def paired_interval(before: np.ndarray, after: np.ndarray, draws: int = 4000, seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    diff = after - before
    idx = rng.integers(0, len(diff), size=(draws, len(diff)))
    means = diff[idx].mean(axis=1)
    return float(np.quantile(means, 0.05)), float(np.quantile(means, 0.95))


def run_setting(name: str, config: AdaptConfig, drafter_path, bridge, stream, heldout, seed: int) -> dict:
    model = load_model(drafter_path)
    torch.manual_seed(seed)  # the same LoRA draw for every setting of the same rank and targets
    adapter = OnlineAdapter(model, bridge, config)
    learner = adapter.learner
    before = per_example_acceptance(learner, heldout)
    for example in stream:
        adapter.add(example)
    after = per_example_acceptance(learner, heldout)
    lo, hi = paired_interval(before, after)
    s = adapter.stats
    gain = float(after.mean() - before.mean())
    result = {"setting": name, "before": float(before.mean()), "after": float(after.mean()), "gain": gain,
              "relative_gain": gain / max(float(before.mean()), 1e-9), "interval_90": [lo, hi],
              "updates": s.updates, "rollbacks": s.rollbacks, "steps": s.steps, "update_s": s.update_seconds,
              "gain_per_training_minute": 60 * gain / max(s.update_seconds, 1e-9),
              "per_prompt_before": before.tolist(), "per_prompt_after": after.tolist()}
    print(f"[{name}] {result['before']:.3f} -> {result['after']:.3f} ({100 * result['relative_gain']:+.1f}%, "
          f"90% [{lo:+.3f}, {hi:+.3f}]), {s.updates} updates ({s.rollbacks} rolled back), "
          f"{s.update_seconds:.0f}s", file=sys.stderr, flush=True)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--domain", default="docs", help="a domain of omnidraft.corpora (default: docs, an unseen one)")
    ap.add_argument("--stream", type=int, default=40, help="prompts the adapter learns from (adapt split)")
    ap.add_argument("--heldout", type=int, default=24, help="held-out prompts (eval split)")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--settings", default="", help="comma-separated names (default: all)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target_path, drafter_path = resolve_pair_paths(None, None)
    target_vocab, draft_vocab = load_vocab(target_path), load_vocab(drafter_path)
    target = EagerRunner(load_model(target_path), 1024, name="target")
    probe = load_model(drafter_path)
    bridge = VocabBridge(draft_vocab.padded(probe.config.vocab_size), target_vocab.padded(target.vocab_size))
    del probe
    mapping = Mapping.from_bridge(bridge)
    eos = frozenset({target_vocab.tokenizer.eos_token_id})
    stream = decode_examples(target, target_vocab, bridge, mapping,
                             corpora.prompts(args.domain, args.stream, args.seed, "adapt"), args.max_new_tokens, eos,
                             "stream")
    heldout = decode_examples(target, target_vocab, bridge, mapping,
                              corpora.prompts(args.domain, args.heldout, args.seed, "eval"), args.max_new_tokens, eos,
                              "held out")
    del target
    chosen = settings(AdaptConfig(lora=LoRAConfig()))
    if args.settings:
        chosen = {k: chosen[k] for k in args.settings.split(",")}
    result = {"command": " ".join(["benchmarks/adapt_study.py", *sys.argv[1:]]), "date": time.strftime("%Y-%m-%d"),
              "threads": args.threads, "domain": args.domain, "stream": len(stream), "heldout": len(heldout),
              "drafter": drafter_path.name, "target": target_path.name, "max_new_tokens": args.max_new_tokens,
              "results": []}
    for name, config in chosen.items():
        result["results"].append(run_setting(name, config, drafter_path, bridge, stream, heldout, args.seed))
        save_results(args.out, result, render)
    return 0


def render(r: dict) -> str:
    lines = [f"Adaptation settings on the {r['domain']} domain (unseen by the shipped drafter), {r['date']}: "
             f"{r['stream']} stream prompts replayed into each setting, {r['heldout']} held-out prompts, "
             f"{r['max_new_tokens']} target tokens each, {r['threads']} threads, eager. Acceptance: teacher-forced "
             f"greedy acceptance per target token on the held-out prompts; interval: paired 90% over the held-out "
             f"prompts. Command: `{r['command']}`.", "",
             "| setting | before | after | gain | 90% interval | updates (rolled back) | steps | training s | "
             "gain per training minute |", "|---|---|---|---|---|---|---|---|---|"]
    for x in r["results"]:
        lo, hi = x["interval_90"]
        lines.append(f"| {x['setting']} | {x['before']:.3f} | {x['after']:.3f} | {x['gain']:+.3f} "
                     f"({100 * x['relative_gain']:+.1f}%) | [{lo:+.3f}, {hi:+.3f}] | {x['updates']} ({x['rollbacks']}) | "
                     f"{x['steps']} | {x['update_s']:.0f} | {x['gain_per_training_minute']:+.4f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
