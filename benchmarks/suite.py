"""Benchmark suite: every way to decode the pair, side by side, in one process, on the same prompts.

Systems: the eager pair (one per --drafter) and every exported bundle given with
--bundle DIR[:backend] (ExecuTorch and/or onnxruntime). On each system, per domain
(code, prose, chat):

  1. warm-up on the corpora's "adapt" split: the n-gram cache and the acceptance
     head learn, and the drafter's LoRA adapter too where the system can train it
     (eager, or ExecuTorch with a bundle exported --with-training);
  2. measured prompts from the "eval" split (disjoint from the warm-up), every
     method interleaved prompt by prompt on the same runners:
       target-only (the baseline of this system's ratios); on eager systems the
       Hugging Face peer, generate() and assisted generation with the other
       tokenizer; speculative with fixed k without and with the n-gram cache;
       --draft-len auto (cache + head); adapted (auto + cache + head + LoRA,
       updates paused while measuring; their cost is reported apart).
Greedy: every method's output must equal target-only's; the table flags any that
differ. The analytic ceiling uses each method's measured acceptance alpha, its mean
draft length k and the system's measured cost ratio c (../shared/notes/method.md).
Writes results.json, table.md and suite.png to --out.

    .venv/bin/python benchmarks/suite.py --out benchmarks/results/suite \\
        --bundle ~/.cache/omnidraft/bundles/et-fp32 --drafter default
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

import torch
from tqdm import tqdm

from omnidraft import corpora
from omnidraft.adaptation.online import AdaptConfig, OnlineAdapter
from omnidraft.adaptation.predictor import AcceptancePredictor
from omnidraft.errors import OmniDraftError
from omnidraft.pair import build_bundle_pair, build_eager_pair, learner_for
from omnidraft.runtime.acceptance import AcceptanceHead
from omnidraft.runtime.decoding import GenerationConfig, SpeculativeDecoder
from omnidraft.runtime.drafting import DraftModel
from omnidraft.runtime.ngram_cache import NGramCache

sys.path.insert(0, str(Path(__file__).parent))
from common import Method, ceiling, hf_generate, save_results, step_ms, summarize  # noqa: E402

PEERS = ("HF generate (target-only)", "HF assisted (other tokenizer)")


def systems(args) -> list[tuple[str, callable]]:
    """(label, loader) per system; loaders build the pair lazily (one system in memory at a time)."""
    out = []
    for drafter in args.drafter or ["default"]:
        path = None if drafter == "default" else drafter
        name = "default drafter" if path is None else Path(path).name
        out.append((f"eager fp32, {name}", lambda p=path: build_eager_pair(args.target, p, use_ngram_cache=False)))
    for item in args.bundle:
        path, _, backend = item.partition(":")
        for b in [backend] if backend else ["executorch", "onnxruntime"]:
            out.append((f"{b}, {Path(path).name}", lambda p=path, b=b: _bundle_pair(p, b, args.threads)))
    return out


def _bundle_pair(path: str, backend: str, threads: int):
    from omnidraft.bundle import load_bundle

    bundle = load_bundle(path)
    if backend == "onnxruntime" and "onnx" not in bundle.model("target")["graphs"]:
        return None
    if backend == "executorch" and "executorch" not in bundle.model("target")["graphs"]:
        return None
    trainable = backend == "executorch" and bool(bundle.manifest.get("training"))
    return build_bundle_pair(path, backend, threads=threads, use_ngram_cache=False, lora_drafter=trainable)


def warm_up(pair, learner, zero_lora, domain: str, args, bar) -> tuple:
    """The domain's warm-up stream with everything learning; returns (cache, predictor, lora state, adapter)."""
    dec = pair.decoder
    drafter = dec.drafter
    predictor = None
    if drafter.has_head:
        drafter.head = AcceptanceHead.initial(drafter.head.n_features)
        predictor = AcceptancePredictor(drafter.head)
    drafting = DraftModel(drafter, dec.bridge, NGramCache(dec.bridge.pair_id), predictor)
    adapter = None
    if learner is not None:
        learner.load_state(zero_lora)
        drafter.reset()
        adapter = OnlineAdapter(learner, dec.bridge, AdaptConfig(lr=args.adapt_lr))
    warm = SpeculativeDecoder(dec.target, pair.target_vocab, drafting, adapter)
    chat = domain == "chat"
    draft = _auto(args) if drafter.has_head else dict(draft_len=args.draft_len)
    for text in corpora.prompts(domain, args.warmup, split="adapt", max_chars=args.prompt_chars):
        s = warm.generate(pair.encode_prompt(text, chat=chat),
                          GenerationConfig(args.max_new_tokens, eos_ids=pair.eos_ids(chat), **draft)).stats
        bar.set_postfix_str(f"{domain} warm-up acc {s['acceptance_rate']:.2f}")
        bar.update()
    lora = learner.state() if learner is not None else None
    return warm.ngram_cache, predictor, lora, warm.adapter


def _auto(args) -> dict:
    return dict(draft_policy="auto", max_draft_len=args.cap, gamma=args.gamma)


def run_system(label: str, pair, args, bar) -> dict:
    dec = pair.decoder
    drafter = dec.drafter
    n = min(64, dec.target.max_context // 2)
    prefix = pair.encode_prompt(corpora.prompts("prose", 1, seed=9)[0])[:n]
    c = step_ms(drafter, dec.bridge.draft_prompt(prefix)[:n]) / step_ms(dec.target, prefix)
    learner, zero_lora, why_not = None, None, None
    try:
        learner = OnlineAdapter(learner_for(pair, AdaptConfig(lr=args.adapt_lr)), dec.bridge,
                                AdaptConfig(lr=args.adapt_lr)).learner
        zero_lora = learner.state()
    except OmniDraftError as e:
        why_not = str(e)
    peers = args.peers and hasattr(drafter, "model")
    fixed = dict(draft_len=args.draft_len)
    totals: dict[str, Counter] = {}
    out = {"system": label, "backend": dec.target.backend, "drafter": pair.drafter_name, "target": pair.target_name,
           "cost_ratio_c": c, "adaptation": why_not or "lora", "domains": {}}
    for domain in corpora.DOMAINS:
        chat = domain == "chat"
        eos = pair.eos_ids(chat)
        cache, predictor, lora, adapter = warm_up(pair, learner, zero_lora, domain, args, bar)
        methods = {"target-only": Method(pair, None)}
        methods[f"k={args.draft_len}, no n-gram cache"] = Method(pair, fixed, None, predictor, learner, zero_lora)
        methods[f"k={args.draft_len} + n-gram cache"] = Method(pair, fixed, cache, predictor, learner, zero_lora)
        if drafter.has_head:
            methods["auto + n-gram cache"] = Method(pair, _auto(args), cache, predictor, learner, zero_lora)
        if learner is not None:
            draft = _auto(args) if drafter.has_head else fixed
            methods["adapted: LoRA + " + ("auto" if drafter.has_head else f"k={args.draft_len}") + " + cache"] = \
                Method(pair, draft, cache, predictor, learner, lora)
        peer_totals = {name: Counter() for name in (PEERS if peers else ())}
        for text in corpora.prompts(domain, args.prompts, args.seed, "eval", args.prompt_chars):
            ids = pair.encode_prompt(text, chat=chat)
            reference = None
            for method in methods.values():
                tokens = method.run(ids, args.max_new_tokens, eos)
                reference = tokens if reference is None else reference
                method.totals["differ"] += tokens != reference
            if peers:
                if learner is not None:
                    learner.load_state(zero_lora)  # the peer drafts with the pretrained drafter
                hf_target, hf_drafter = dec.target.model, drafter.model
                for name, assist in zip(PEERS, ({}, dict(assistant_model=hf_drafter, tokenizer=pair.target_vocab.tokenizer,
                                                          assistant_tokenizer=dec.bridge.draft.tokenizer))):
                    tokens, seconds = hf_generate(hf_target, ids, eos, args.max_new_tokens, **assist)
                    peer_totals[name].update(tokens=len(tokens), seconds=seconds, differ=int(tokens != reference))
            bar.set_postfix_str(f"{domain} " + " ".join(
                f"{m.totals['tokens'] / max(m.totals['seconds'], 1e-9):.1f}" for m in methods.values()) + " tok/s")
            bar.update()
        base_tps = methods["target-only"].summary(0)["tokens_per_s"]
        rows = {name: m.summary(base_tps) for name, m in methods.items()}
        for name, t in peer_totals.items():
            rows[name] = summarize(Counter(calls=0, **t), base_tps) | {"tokens_per_target_call": None}
        out["domains"][domain] = {"methods": rows,
                                  "adaptation": adapter.report() if adapter is not None else None}
        for name, m in list(methods.items()) + list(peer_totals.items()):
            totals.setdefault(name, Counter()).update(m.totals if isinstance(m, Method) else m)
    base_tps = summarize(totals["target-only"], 0)["tokens_per_s"]
    out["overall"] = {}
    for name, t in totals.items():
        row = summarize(Counter(t), base_tps)
        if name in PEERS:
            row["tokens_per_target_call"] = None
        elif row["acceptance_rate"] is not None:
            row["ceiling"] = ceiling(row["acceptance_rate"], row["mean_draft_len"], c)
        out["overall"][name] = row
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--drafter", action="append", help="eager system's drafter folder, or 'default' (repeatable)")
    ap.add_argument("--target", help="eager systems' target folder (default: Gemma-3-270M)")
    ap.add_argument("--no-eager", action="store_true", help="only the bundles")
    ap.add_argument("--bundle", action="append", default=[], help="DIR or DIR:backend (default: every backend it has)")
    ap.add_argument("--warmup", type=int, default=8, help="warm-up prompts per domain (adapt split)")
    ap.add_argument("--prompts", type=int, default=4, help="measured prompts per domain (eval split)")
    ap.add_argument("--max-new-tokens", type=int, default=40)
    ap.add_argument("--draft-len", type=int, default=4, help="k of the fixed-length methods")
    ap.add_argument("--cap", type=int, default=8, help="longest draft of 'auto' (bundles: at most their maximum)")
    ap.add_argument("--gamma", type=float, default=0.5)
    ap.add_argument("--adapt-lr", type=float, default=3e-4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prompt-chars", type=int, default=600, help="longest prompt text")
    ap.add_argument("--no-peers", dest="peers", action="store_false", help="skip Hugging Face generate()")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    chosen = [s for s in systems(args) if not (args.no_eager and s[0].startswith("eager"))]
    result = {"command": " ".join(["benchmarks/suite.py", *sys.argv[1:]]), "threads": args.threads,
              "date": time.strftime("%Y-%m-%d"), "warmup": args.warmup, "prompts": args.prompts,
              "max_new_tokens": args.max_new_tokens, "draft_len": args.draft_len, "cap": args.cap,
              "gamma": args.gamma, "systems": []}
    per_system = (args.warmup + args.prompts) * len(corpora.DOMAINS)
    with tqdm(total=per_system * len(chosen), file=sys.stderr, unit="prompt", dynamic_ncols=True) as bar:
        for label, load in chosen:
            bar.set_description(label)
            try:
                pair = load()
            except OmniDraftError as e:
                bar.write(f"[suite] skipping {label}: {e}")
                pair = None
            if pair is None:
                bar.update(per_system)
                continue
            result["systems"].append(run_system(label, pair, args, bar))
            del pair
            save_results(args.out, result, render_table)  # partial results survive an interruption
            plot(result, args.out / "suite.png")
    return 0


def _fmt(x, spec=".2f", suffix=""):
    return "-" if x is None else f"{x:{spec}}{suffix}"


def render_table(r: dict) -> str:
    lines = [
        f"Benchmark suite, greedy, {r['max_new_tokens']} new tokens, {r['threads']} threads, {r['date']}: per domain "
        f"(code, prose, chat) {r['warmup']} warm-up prompts (cache, head and LoRA learn), then {r['prompts']} measured "
        f"prompts, all methods interleaved prompt by prompt. Speedup is against the same system's target-only "
        f"decoding; ceiling = (1 - a^(k+1)) / ((1 - a)(k c + 1)) at the measured acceptance a, mean draft length k "
        f"and cost ratio c. Command: `{r['command']}`.",
        "",
        "| system | c | method | tok/s | vs target-only | tokens / target call | acceptance | mean draft len | "
        "ceiling | outputs differing |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in r["systems"]:
        for name, m in s["overall"].items():
            flag = " **(differ!)**" if m["outputs_differing"] else ""
            lines.append(f"| {s['system']} | {s['cost_ratio_c']:.2f} | {name} | {m['tokens_per_s']:.2f} | "
                         f"{m['speedup']:.2f}x | {_fmt(m['tokens_per_target_call'])} | {_fmt(m['acceptance_rate'])} | "
                         f"{_fmt(m['mean_draft_len'] or None)} | {_fmt(m.get('ceiling'), '.2f', 'x')} | "
                         f"{m['outputs_differing']}{flag} |")
    lines += ["", "Per domain, tok/s (vs target-only):", "",
              "| system | method | " + " | ".join(corpora.DOMAINS) + " |", "|---|---|" + "---|" * len(corpora.DOMAINS)]
    for s in r["systems"]:
        for name in s["overall"]:
            cells = [f"{d['methods'][name]['tokens_per_s']:.2f} ({d['methods'][name]['speedup']:.2f}x)"
                     for d in s["domains"].values()]
            lines.append(f"| {s['system']} | {name} | " + " | ".join(cells) + " |")
    adapted = [(s, dom, d["adaptation"]) for s in r["systems"] for dom, d in s["domains"].items() if d["adaptation"]]
    if adapted:
        lines += ["", "LoRA updates during the warm-ups (paused while measuring):", "",
                  "| system | domain | updates (rolled back) | s / step |", "|---|---|---|---|"]
        for s, dom, a in adapted:
            lines.append(f"| {s['system']} | {dom} | {a['updates']} ({a['rollbacks']}) | {a['seconds_per_step']:.1f} |")
    return "\n".join(lines) + "\n"


def plot(r: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from omnidraft.atomic import write_bytes_atomic

    systems_ = r["systems"]
    cols = min(3, len(systems_))
    rows = -(-len(systems_) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 4.5 * rows), squeeze=False)
    for ax in axes.flat[len(systems_):]:
        ax.set_visible(False)
    for ax, s in zip(axes.flat, systems_):
        names = list(s["overall"])
        y = range(len(names))
        ax.barh(list(y), [s["overall"][n]["speedup"] for n in names], color="tab:blue", label="measured")
        ceil = [(i, s["overall"][n]["ceiling"]) for i, n in enumerate(names) if "ceiling" in s["overall"][n]]
        if ceil:
            ax.plot([v for _, v in ceil], [i for i, _ in ceil], "k|", markersize=14, label="analytic ceiling")
        ax.axvline(1.0, color="black", lw=0.8)
        ax.set_yticks(list(y), names)
        ax.invert_yaxis()
        ax.set(title=f"{s['system']} (c = {s['cost_ratio_c']:.2f})", xlabel="speedup vs target-only")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right")
    fig.suptitle(f"greedy, {r['max_new_tokens']} new tokens, {r['threads']} threads, {r['date']}")
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    write_bytes_atomic(path, tmp.read_bytes())
    tmp.unlink()


if __name__ == "__main__":
    sys.exit(main())
