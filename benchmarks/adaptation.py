"""Online adaptation on the default pair: acceptance over a stream, then on held-out prompts.

For each domain, each configuration starts from the pretrained drafter and an
empty n-gram cache, runs the stream of `--stream` prompts (the corpora's
"adapt" split) while adapting, and reports acceptance and tokens per target
call per window of `--window` prompts. It is then evaluated, adaptation paused,
on `--heldout` prompts of the "eval" split, which adaptation never saw. With
--forgetting, the configurations are also evaluated on another domain's
held-out prompts. Greedy: every configuration's held-out outputs must be
identical (the target decides them); the table flags any that differ.

With --bundle (an ExecuTorch bundle exported --with-training) and --learners
eager,executorch, every configuration also runs on the phone's path: the bundle's
target and LoRA-input drafter on ExecuTorch, trained through its update-step program.
The gain of adapting (held-out acceptance, cache+hybrid-lora minus cache) is then
reported per learner with a 90% interval from resampling the held-out prompts (the
same resample for both configurations: a paired comparison). Both learners start
from the same LoRA tensors (the program's lora_init, or fresh ones drawn with
--lora-seed), so that a difference between them is the learner's, not the draw's.

    .venv/bin/python benchmarks/adaptation.py --out benchmarks/results/adaptation
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from omnidraft import corpora
from omnidraft.adaptation.examples import Mapping
from omnidraft.adaptation.learners import EagerLearner, program_lora_init
from omnidraft.adaptation.lora import LoRAConfig, add_lora, lora_parameters
from omnidraft.adaptation.online import AdaptConfig, OnlineAdapter
from omnidraft.adaptation.stream import PER_PROMPT, evaluate, run_stream
from omnidraft.bundle import load_bundle
from omnidraft.models import DEFAULT_DRAFTER, load_model, load_tokenizer, load_vocab
from omnidraft.catalog import resolve_model_path
from omnidraft.adaptation.learners import learner_for, lora_input_names
from omnidraft.pair import build_eager_pair, open_runner
from omnidraft.runtime.decoding import GenerationConfig, SpeculativeDecoder
from omnidraft.runtime.drafting import DraftModel
from omnidraft.runtime.runner import EagerRunner
from omnidraft.runtime.vocab import Vocab

sys.path.insert(0, str(Path(__file__).parent))
from common import save_results  # noqa: E402


def configurations(lr_lora: float, lr_full: float, batch: int, window: int) -> dict:
    """name -> (use the n-gram cache, adaptation config or None)."""
    size = {"batch": batch, "window": window}
    return {
        "none": (False, None),
        "cache": (True, None),
        "cache+kl": (True, AdaptConfig(lam=0.0, lr=lr_lora, **size)),
        "cache+hybrid-full": (True, AdaptConfig(lora=None, lr=lr_full, **size)),
        "cache+hybrid-lora": (True, AdaptConfig(lr=lr_lora, **size)),
    }


def seeded_lora(drafter_path: Path, seed: int) -> dict[str, torch.Tensor]:
    """Fresh LoRA tensors (the default config) drawn with a seed, by name."""
    model = load_model(drafter_path)
    torch.manual_seed(seed)
    add_lora(model, LoRAConfig())
    return {n: p.detach().clone() for n, p in lora_parameters(model).items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--domains", default="code,prose,chat")
    ap.add_argument("--configs", default="none,cache,cache+kl,cache+hybrid-full,cache+hybrid-lora")
    ap.add_argument("--stream", type=int, default=200, help="adaptation prompts per domain")
    ap.add_argument("--window", type=int, default=20)
    ap.add_argument("--heldout", type=int, default=20)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--draft-len", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr-lora", type=float, default=3e-4)
    ap.add_argument("--lr-full", type=float, default=3e-5)
    defaults = AdaptConfig()
    ap.add_argument("--adapt-batch", type=int, default=defaults.batch, help="examples per update step")
    ap.add_argument("--adapt-window", type=int, default=defaults.window, help="draft tokens per example")
    ap.add_argument("--lora-seed", type=int, help="start every LoRA learner from fresh adapters drawn with this seed "
                    "(default: the bundle program's lora_init when it runs, else each learner's own draw)")
    ap.add_argument("--forgetting", default="code:prose", help="adapt:eval domain pairs, comma-separated")
    ap.add_argument("--learners", default="eager", help="eager and/or executorch (needs --bundle), comma-separated")
    ap.add_argument("--bundle", type=Path, help="an ExecuTorch bundle exported --with-training")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    all_configs = configurations(args.lr_lora, args.lr_full, args.adapt_batch, args.adapt_window)
    names = args.configs.split(",")
    learners = args.learners.split(",")
    if "executorch" in learners and args.bundle is None:
        ap.error("--learners executorch needs --bundle DIR (exported --with-training)")
    if "executorch" in learners and "cache+hybrid-full" in names:
        ap.error("the ExecuTorch learner trains LoRA only: drop cache+hybrid-full from --configs")
    pair = build_eager_pair(use_ngram_cache=False)
    target, target_vocab = pair.decoder.target, pair.target_vocab
    drafter_path = resolve_model_path(None, DEFAULT_DRAFTER)
    draft_vocab = Vocab.from_tokenizer(load_tokenizer(drafter_path))
    init = seeded_lora(drafter_path, args.lora_seed) if args.lora_seed is not None else None
    systems = {}
    if "executorch" in learners:
        systems["executorch"] = OnExecuTorch(args.bundle, args.threads, init)
        init = systems["executorch"].init
    systems["eager"] = Eager(target, target_vocab, drafter_path, draft_vocab, init)
    gen = GenerationConfig(max_new_tokens=args.max_new_tokens, draft_len=args.draft_len, eos_ids=pair.eos_ids())
    forgetting = dict(p.split(":") for p in args.forgetting.split(",") if p)
    encode = lambda texts: [pair.encode_prompt(t) for t in texts]  # noqa: E731
    heldout = {d: encode(corpora.prompts(d, args.heldout, split="eval")) for d in corpora.DOMAINS}

    result = {"command": " ".join(["benchmarks/adaptation.py", *sys.argv[1:]]), "threads": args.threads,
              "date": time.strftime("%Y-%m-%d"), "stream": args.stream, "window": args.window,
              "heldout": args.heldout, "max_new_tokens": args.max_new_tokens, "draft_len": args.draft_len,
              "target": pair.target_name, "drafter": drafter_path.name, "learners": learners,
              "adapt_batch": args.adapt_batch, "adapt_window": args.adapt_window,
              "lora_init": ("bundle" if args.lora_seed is None and "executorch" in learners else
                            f"seed {args.lora_seed}" if args.lora_seed is not None else "per learner"), "runs": []}
    start = time.perf_counter()
    for domain in args.domains.split(","):
        stream = encode(corpora.prompts(domain, args.stream, split="adapt"))
        for learner in learners:
            reference = None  # greedy: every configuration's outputs on one backend are the target's
            for name in names:
                use_cache, adapt = all_configs[name]
                dec = systems[learner].decoder(use_cache, adapt)

                def progress(i, stats, name=name, domain=domain, learner=learner):
                    el = time.perf_counter() - start
                    print(f"[{domain} {name} {learner} {i + 1}/{len(stream)}] acc {stats['acceptance_rate']:.2f} "
                          f"tok/call {stats['tokens_per_target_call']:.2f} ({el:.0f}s)", file=sys.stderr,
                          flush=True)

                windows, _ = run_stream(dec, stream, gen, args.window, progress)
                run = {"domain": domain, "config": name, "learner": learner, "windows": windows}
                run["heldout"], outputs = evaluate(dec, heldout[domain], gen)
                reference = reference or outputs
                run["heldout"]["outputs_differing"] = sum(a != b for a, b in zip(outputs, reference))
                if domain in forgetting:
                    other = forgetting[domain]
                    run["forgetting"] = {"eval_domain": other, **evaluate(dec, heldout[other], gen)[0]}
                if dec.adapter is not None:
                    run["adaptation"] = dec.adapter.report()
                if dec.proposer.ngram_cache is not None:
                    run["ngram_cache_entries"] = len(dec.proposer.ngram_cache)
                    run["ngram_cache_bytes"] = len(json.dumps(dec.proposer.ngram_cache.to_json()))
                result["runs"].append(run)
                print(f"== {domain} {name} {learner}: held-out acc {run['heldout']['acceptance_rate']:.3f} "
                      f"tok/call {run['heldout']['tokens_per_target_call']:.2f}", file=sys.stderr, flush=True)
                save_results(args.out, result, render_table)  # partial results survive an interruption
    return 0


class Eager:
    """The eager pair: the target shared by every configuration, a fresh pretrained drafter per configuration.

    `init`: the LoRA tensors every LoRA learner starts from (None: a fresh draw each)."""

    def __init__(self, target, target_vocab, drafter_path, draft_vocab, init=None):
        self.target, self.target_vocab, self.drafter_path, self.draft_vocab = target, target_vocab, drafter_path, draft_vocab
        self.init = init

    def decoder(self, use_cache: bool, adapt: AdaptConfig | None) -> SpeculativeDecoder:
        drafter = EagerRunner(load_model(self.drafter_path), 2 * self.target.max_context, name="drafter")
        drafting = DraftModel.between(self.target, self.target_vocab, drafter, self.draft_vocab, ngram_cache=use_cache)
        adapter = None
        if adapt:
            init = self.init if adapt.lora is not None else None
            learner = EagerLearner(drafter.model, adapt, Mapping.from_bridge(drafting.bridge), init)
            adapter = OnlineAdapter(learner, drafting.bridge, adapt)
        return SpeculativeDecoder(self.target, self.target_vocab, drafting, adapter)


class OnExecuTorch:
    """The phone's path: the bundle's target and LoRA-input drafter on ExecuTorch, its update-step program.

    Every configuration, adapting or not, drafts through the LoRA-input graph (zero adapters
    until an update), so that the baseline and the adapted run share one drafter program.
    `init`: the LoRA tensors to start from (None: the program's lora_init, then kept in .init).
    """

    def __init__(self, bundle_dir: Path, threads: int, init=None):
        self.bundle = load_bundle(bundle_dir)
        self.threads = threads
        if init is None:
            train = self.bundle.root / self.bundle.model("drafter").graphs["executorch_train"]
            init = program_lora_init(train, lora_input_names(self.bundle))
        self.init = init
        self.target = open_runner(self.bundle, "target", "executorch", threads)
        self.target_vocab = load_vocab(self.bundle.tokenizer_dir("target"))
        self.draft_vocab = load_vocab(self.bundle.tokenizer_dir("drafter"))

    def decoder(self, use_cache: bool, adapt: AdaptConfig | None) -> SpeculativeDecoder:
        drafter = open_runner(self.bundle, "drafter", "executorch", self.threads, graph="executorch_lora")
        drafting = DraftModel.between(self.target, self.target_vocab, drafter, self.draft_vocab, ngram_cache=use_cache)
        adapter = None
        if adapt:
            adapter = OnlineAdapter(learner_for(self.bundle, drafting, adapt, self.init), drafting.bridge, adapt)
        return SpeculativeDecoder(self.target, self.target_vocab, drafting, adapter)


def paired_gain(before: dict, after: dict, draws: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Held-out acceptance after minus before, and its 90% interval from resampling the prompts (the same
    resample for both: each prompt's before and after stay paired)."""
    col = PER_PROMPT.index
    b, a = np.array(before["per_prompt"], float), np.array(after["per_prompt"], float)
    rate = lambda m, idx: m[idx, col("accepted")].sum() / max(m[idx, col("drafted")].sum(), 1)  # noqa: E731
    resamples = np.random.default_rng(seed).integers(0, len(b), (draws, len(b)))
    lo, hi = np.percentile([rate(a, i) - rate(b, i) for i in resamples], [5, 95])
    everyone = np.arange(len(b))
    return rate(a, everyone) - rate(b, everyone), lo, hi


def render_table(r: dict) -> str:
    learners = r.get("learners", ["eager"])
    lines = [
        f"Online adaptation, {r['drafter']} -> {r['target']}, greedy, {r['max_new_tokens']} new tokens, "
        f"draft length {r['draft_len']}, {r['threads']} threads, {r['date']}. Stream of {r['stream']} prompts per "
        f"domain (windows of {r['window']}); held-out: {r['heldout']} prompts the adaptation never saw. "
        f"Learners: {', '.join(learners)} (eager: torch target and drafter; executorch: the bundle's programs)"
        + (f"; update steps of {r['adapt_batch']} x {r['adapt_window']} tokens, LoRA init: {r['lora_init']}"
           if "lora_init" in r else "") + ".",
        "",
        "| domain | learner | config | acceptance per window | held-out acceptance | held-out tokens / call | "
        "held-out tok/s | updates (rolled back) | s / update step | extra memory MB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in r["runs"]:
        h = run["heldout"]
        a = run.get("adaptation")
        per_window = " ".join(f"{w['acceptance_rate']:.2f}" for w in run["windows"])
        extra = sum(a["extra_bytes"].values()) if a else 0
        extra += run.get("ngram_cache_bytes", 0)
        flag = f" ({h['outputs_differing']} outputs differ!)" if h["outputs_differing"] else ""
        updates = f"{a['updates']} ({a['rollbacks']})" if a else "-"
        per_step = f"{a['seconds_per_step']:.1f}" if a else "-"
        lines.append(
            f"| {run['domain']} | {run.get('learner', 'eager')} | {run['config']} | {per_window} | "
            f"{h['acceptance_rate']:.3f}{flag} | {h['tokens_per_target_call']:.2f} | {h['tokens_per_s']:.2f} | "
            f"{updates} | {per_step} | {extra / 1e6:.2f} |"
        )
    lines += gain_table(r)
    forget = [run for run in r["runs"] if "forgetting" in run]
    if forget:
        lines += ["", "Forgetting: adapted on one domain, evaluated on another's held-out prompts.", "",
                  "| adapted on | learner | config | evaluated on | acceptance | tokens / call |",
                  "|---|---|---|---|---|---|"]
        for run in forget:
            f = run["forgetting"]
            lines.append(f"| {run['domain']} | {run.get('learner', 'eager')} | {run['config']} | {f['eval_domain']} | "
                         f"{f['acceptance_rate']:.3f} | {f['tokens_per_target_call']:.2f} |")
    return "\n".join(lines) + "\n"


def gain_table(r: dict) -> list[str]:
    """What adapting gains per domain and learner (cache -> cache+hybrid-lora), and executorch's share of eager's."""
    runs = {(run["domain"], run.get("learner", "eager"), run["config"]): run for run in r["runs"]}
    pairs = {(domain, learner): (runs[domain, learner, "cache"]["heldout"], after["heldout"])
             for (domain, learner, config), after in runs.items()
             if config == "cache+hybrid-lora" and (domain, learner, "cache") in runs
             and "per_prompt" in runs[domain, learner, "cache"]["heldout"]}
    gains = {key: paired_gain(*pair) for key, pair in pairs.items()}
    rows = []
    for (domain, learner), (b, a) in pairs.items():
        gain, lo, hi = gains[domain, learner]
        eager = gains.get((domain, "eager"), (0.0,))[0]
        share = f"{gain / eager:.0%}" if learner == "executorch" and eager > 0 else ""
        rows.append(f"| {domain} | {learner} | {b['acceptance_rate']:.3f} -> {a['acceptance_rate']:.3f} | "
                    f"{gain:+.3f} [{lo:+.3f}, {hi:+.3f}] | {b['tokens_per_target_call']:.2f} -> "
                    f"{a['tokens_per_target_call']:.2f} | {share} |")
    if not rows:
        return []
    return ["", "Gain of adapting (cache -> cache+hybrid-lora), held-out, with a 90% interval from resampling the "
            "held-out prompts (paired):", "",
            "| domain | learner | held-out acceptance | gain [90% interval] | tokens / call | share of the eager gain |",
            "|---|---|---|---|---|---|", *rows]


if __name__ == "__main__":
    sys.exit(main())
