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
from omnidraft.models import load_model, load_vocab
from omnidraft.catalog import resolve_pair_paths
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
        "before (2026-12-06)": replace(base, lr=3e-4, steps=2, replay=2, window=64, prompt_nll=False, warmup=1,
                                       guard_base=False, guard_margin=0.0),
        "default": base,
        "default, no guard": replace(base, guard=False),
        "default, window 64": replace(base, window=64),
        "default, steps 4": replace(base, steps=4),
        "default, no prompt": replace(base, prompt_nll=False),
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


def eager_learner(drafter_path, bridge, config: AdaptConfig, seed: int):
    model = load_model(drafter_path)
    torch.manual_seed(seed)  # the same LoRA draw for every setting of the same rank and targets
    return OnlineAdapter(model, bridge, config).learner


def executorch_learner(bundle_dir: Path, threads: int):
    """A maker of the phone's learner: the bundle's update-step program and its LoRA-input drafter on ExecuTorch
    (the program's window and batch; LoRA tensors from its lora_init)."""
    from omnidraft.adaptation.learners import ExecuTorchLearner
    from omnidraft.bundle import load_bundle
    from omnidraft.adaptation.learners import lora_input_names
    from omnidraft.pair import open_runner

    bundle = load_bundle(bundle_dir)
    training = bundle.manifest.training
    runner = open_runner(bundle, "drafter", "executorch", threads, graph="executorch_lora")
    train = bundle.root / bundle.model("drafter").graphs["executorch_train"]

    def make(drafter_path, bridge, config: AdaptConfig, seed: int):
        if config.window != training["window"] or config.batch != training["batch"]:
            raise SystemExit(f"the bundle's program takes {training['batch']} x {training['window']} tokens per step")
        return ExecuTorchLearner(train, lora_input_names(bundle), training["window"], training["batch"],
                                 training["mapped"], config.lr, runner, None, config.warmup)
    return make


def run_setting(name: str, config: AdaptConfig, drafter_path, bridge, stream, heldout, seed: int,
                orders: int, make_learner=eager_learner) -> dict:
    """The setting over `orders` orders of the stream (the first as decoded, the others shuffled), each from
    the pretrained drafter: per held-out prompt, the mean acceptance after them."""
    afters, seconds, updates, rollbacks, steps = [], 0.0, 0, 0, 0
    for order in range(orders):
        adapter = OnlineAdapter(make_learner(drafter_path, bridge, config, seed), bridge, config)
        learner = adapter.learner
        if order == 0:
            before = per_example_acceptance(learner, heldout)
        sequence = list(stream)
        if order:
            np.random.default_rng(seed + order).shuffle(sequence)
        for example in sequence:
            adapter.add(example)
        afters.append(per_example_acceptance(learner, heldout))
        st = adapter.stats
        seconds, updates, rollbacks, steps = (seconds + st.update_seconds, updates + st.updates,
                                              rollbacks + st.rollbacks, steps + st.steps)
    after = np.mean(afters, axis=0)
    lo, hi = paired_interval(before, after)
    s = type("Totals", (), dict(update_seconds=seconds / orders, updates=updates / orders, rollbacks=rollbacks / orders,
                                steps=steps / orders))
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
    ap.add_argument("--orders", type=int, default=3, help="orders of the stream each setting is replayed in")
    ap.add_argument("--bundle", type=Path, help="learn on ExecuTorch: a bundle exported --with-training (the phone's "
                                               "learner; its program fixes the window and batch)")
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
    key = f"{args.domain}-{args.stream}-{args.heldout}-{args.max_new_tokens}-{args.seed}-{bridge.pair_id}"
    cache = args.out / f"examples-{key}.pt"
    if cache.exists():  # the target's continuations of the same prompts, decoded by an earlier run
        saved = torch.load(cache, weights_only=False)
        stream, heldout = saved["stream"], saved["heldout"]
    else:
        stream = decode_examples(target, target_vocab, bridge, mapping,
                                 corpora.prompts(args.domain, args.stream, args.seed, "adapt"), args.max_new_tokens,
                                 eos, "stream")
        heldout = decode_examples(target, target_vocab, bridge, mapping,
                                  corpora.prompts(args.domain, args.heldout, args.seed, "eval"), args.max_new_tokens,
                                  eos, "held out")
        args.out.mkdir(parents=True, exist_ok=True)
        torch.save({"stream": stream, "heldout": heldout}, cache)
    del target
    chosen = settings(AdaptConfig(lora=LoRAConfig()))
    if args.settings:
        chosen = {k: chosen[k] for k in args.settings.split(",")}
    result = {"command": " ".join(["benchmarks/adapt_study.py", *sys.argv[1:]]), "date": time.strftime("%Y-%m-%d"),
              "threads": args.threads, "domain": args.domain, "stream": len(stream), "heldout": len(heldout),
              "drafter": drafter_path.name, "target": target_path.name, "max_new_tokens": args.max_new_tokens,
             "orders": args.orders, "learner": "executorch" if args.bundle else "eager",
              "results": []}
    for name, config in chosen.items():
        make = executorch_learner(args.bundle, args.threads) if args.bundle else eager_learner
        result["results"].append(run_setting(name, config, drafter_path, bridge, stream, heldout, args.seed,
                                             args.orders, make))
        save_results(args.out, result, render)
    return 0


def render(r: dict) -> str:
    lines = [f"Adaptation settings on the {r['domain']} domain (unseen by the shipped drafter), {r['date']}: "
             f"{r['stream']} stream prompts replayed into each setting in {r['orders']} orders (held-out acceptance "
             f"after them averaged per prompt; figures per order), {r['heldout']} held-out prompts, "
             f"{r['max_new_tokens']} target tokens each, {r['threads']} threads. Acceptance: teacher-forced "
             f"greedy acceptance per target token on the held-out prompts; interval: paired 90% over the held-out "
             f"prompts; learner: {r.get('learner', 'eager')}. Command: `{r['command']}`.", "",
             "| setting | before | after | gain | 90% interval | updates (rolled back) | steps | training s | "
             "gain per training minute |", "|---|---|---|---|---|---|---|---|---|"]
    for x in r["results"]:
        lo, hi = x["interval_90"]
        lines.append(f"| {x['setting']} | {x['before']:.3f} | {x['after']:.3f} | {x['gain']:+.3f} "
                     f"({100 * x['relative_gain']:+.1f}%) | [{lo:+.3f}, {hi:+.3f}] | {x['updates']:.1f} ({x['rollbacks']:.1f}) | "
                     f"{x['steps']:.0f} | {x['update_s']:.0f} | {x['gain_per_training_minute']:+.4f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
