"""Online adaptation on the default pair: acceptance over a stream, then on held-out prompts.

For each domain, each configuration starts from the pretrained drafter and an
empty n-gram cache, runs the stream of `--stream` prompts (the corpora's
"adapt" split) while adapting, and reports acceptance and tokens per target
call per window of `--window` prompts. It is then evaluated, adaptation paused,
on `--heldout` prompts of the "eval" split, which adaptation never saw. With
--forgetting, the configurations are also evaluated on another domain's
held-out prompts. Greedy: every configuration's held-out outputs must be
identical (the target decides them); the table flags any that differ.

    .venv/bin/python benchmarks/adaptation.py --out benchmarks/results/adaptation
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from omnidraft import corpora
from omnidraft.adaptation.online import AdaptConfig, OnlineAdapter
from omnidraft.adaptation.stream import evaluate, run_stream
from omnidraft.models import DEFAULT_DRAFTER, load_model, load_tokenizer, resolve_model_path
from omnidraft.pair import build_eager_pair
from omnidraft.runtime.decoding import GenerationConfig, SpeculativeDecoder
from omnidraft.runtime.drafting import DraftModel
from omnidraft.runtime.runner import EagerRunner
from omnidraft.runtime.vocab import Vocab

sys.path.insert(0, str(Path(__file__).parent))
from common import save_results  # noqa: E402


def configurations(lr_lora: float, lr_full: float) -> dict:
    """name -> (use the n-gram cache, adaptation config or None)."""
    return {
        "none": (False, None),
        "cache": (True, None),
        "cache+kl": (True, AdaptConfig(lam=0.0, lr=lr_lora)),
        "cache+hybrid-full": (True, AdaptConfig(lora=None, lr=lr_full)),
        "cache+hybrid-lora": (True, AdaptConfig(lr=lr_lora)),
    }


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
    ap.add_argument("--forgetting", default="code:prose", help="adapt:eval domain pairs, comma-separated")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    all_configs = configurations(args.lr_lora, args.lr_full)
    names = args.configs.split(",")
    pair = build_eager_pair(use_ngram_cache=False)
    target, target_vocab = pair.decoder.target, pair.target_vocab
    drafter_path = resolve_model_path(None, DEFAULT_DRAFTER)
    draft_vocab = Vocab.from_tokenizer(load_tokenizer(drafter_path))
    gen = GenerationConfig(max_new_tokens=args.max_new_tokens, draft_len=args.draft_len, eos_ids=pair.eos_ids())
    forgetting = dict(p.split(":") for p in args.forgetting.split(",") if p)
    encode = lambda texts: [pair.encode_prompt(t) for t in texts]  # noqa: E731
    heldout = {d: encode(corpora.prompts(d, args.heldout, split="eval")) for d in corpora.DOMAINS}

    result = {"command": " ".join(["benchmarks/adaptation.py", *sys.argv[1:]]), "threads": args.threads,
              "date": time.strftime("%Y-%m-%d"), "stream": args.stream, "window": args.window,
              "heldout": args.heldout, "max_new_tokens": args.max_new_tokens, "draft_len": args.draft_len,
              "target": pair.target_name, "drafter": drafter_path.name, "runs": []}
    start = time.perf_counter()
    for domain in args.domains.split(","):
        stream = encode(corpora.prompts(domain, args.stream, split="adapt"))
        reference = None
        for name in names:
            use_cache, adapt = all_configs[name]
            drafter = EagerRunner(load_model(drafter_path), 2 * target.max_context, name="drafter")
            drafting = DraftModel.between(target, target_vocab, drafter, draft_vocab, ngram_cache=use_cache)
            adapter = OnlineAdapter(drafter.model, drafting.bridge, adapt) if adapt else None
            dec = SpeculativeDecoder(target, target_vocab, drafting, adapter)

            def progress(i, stats, name=name, domain=domain):
                el = time.perf_counter() - start
                print(f"[{domain} {name} {i + 1}/{len(stream)}] acc {stats['acceptance_rate']:.2f} "
                      f"tok/call {stats['tokens_per_target_call']:.2f} ({el:.0f}s)", file=sys.stderr, flush=True)

            windows, _ = run_stream(dec, stream, gen, args.window, progress)
            run = {"domain": domain, "config": name, "windows": windows}
            run["heldout"], outputs = evaluate(dec, heldout[domain], gen)
            reference = reference or outputs
            run["heldout"]["outputs_differing"] = sum(a != b for a, b in zip(outputs, reference))
            if domain in forgetting:
                other = forgetting[domain]
                run["forgetting"] = {"eval_domain": other, **evaluate(dec, heldout[other], gen)[0]}
            if dec.adapter is not None:
                run["adaptation"] = dec.adapter.report()
            if dec.ngram_cache is not None:
                run["ngram_cache_entries"] = len(dec.ngram_cache)
                run["ngram_cache_bytes"] = len(json.dumps(dec.ngram_cache.to_json()))
            result["runs"].append(run)
            print(f"== {domain} {name}: held-out acc {run['heldout']['acceptance_rate']:.3f} "
                  f"tok/call {run['heldout']['tokens_per_target_call']:.2f}", file=sys.stderr, flush=True)
            save_results(args.out, result, render_table)  # partial results survive an interruption
    return 0


def render_table(r: dict) -> str:
    lines = [
        f"Online adaptation, {r['drafter']} -> {r['target']}, eager, greedy, {r['max_new_tokens']} new tokens, "
        f"draft length {r['draft_len']}, {r['threads']} threads, {r['date']}. Stream of {r['stream']} prompts per "
        f"domain (windows of {r['window']}); held-out: {r['heldout']} prompts the adaptation never saw.",
        "",
        "| domain | config | acceptance per window | held-out acceptance | held-out tokens / call | "
        "held-out tok/s | updates (rolled back) | s / update step | extra memory MB |",
        "|---|---|---|---|---|---|---|---|---|",
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
            f"| {run['domain']} | {run['config']} | {per_window} | {h['acceptance_rate']:.3f}{flag} | "
            f"{h['tokens_per_target_call']:.2f} | {h['tokens_per_s']:.2f} | {updates} | {per_step} | {extra / 1e6:.2f} |"
        )
    forget = [run for run in r["runs"] if "forgetting" in run]
    if forget:
        lines += ["", "Forgetting: adapted on one domain, evaluated on another's held-out prompts.", "",
                  "| adapted on | config | evaluated on | acceptance | tokens / call |", "|---|---|---|---|---|"]
        for run in forget:
            f = run["forgetting"]
            lines.append(f"| {run['domain']} | {run['config']} | {f['eval_domain']} | {f['acceptance_rate']:.3f} | "
                         f"{f['tokens_per_target_call']:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
