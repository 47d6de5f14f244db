"""Benchmark suite: every way to decode the pair, side by side, in one process, on the same prompts.

Systems: the eager pair (one per --drafter) and every exported bundle given with
--bundle DIR[:backend] (ExecuTorch and/or onnxruntime). On each system, per workload
(the open-ended domains code, prose, chat and the repetitive workloads code-infile,
structured, quote, multiturn, history; omnidraft/corpora.py):

  1. warm-up on the workload's "adapt" split: the n-gram cache, the acceptance head
     and the lookup scorer learn, the warm-up texts join the lookup history, the hybrid's
     cost model measures the target and the drafter (as its costs file would), and with
     --extended the drafter's LoRA adapter trains where the system can (eager, or
     ExecuTorch with a bundle exported --with-training);
  2. measured prompts from the "eval" split (disjoint from the warm-up), every method
     interleaved prompt by prompt on the same runners:
       target-only (the baseline of this system's ratios); drafter (draft length
       auto, n-gram cache, acceptance head); lookup (context and history, no drafter);
       hybrid (each round the better of lookup and the drafter: the default of
       `omnidraft generate`). Each method keeps learning from its own traffic (its
       lookup history grows with its outputs).
       --extended adds fixed k without and with the n-gram cache, LoRA-adapted
       (updates paused while measuring; their cost reported apart) and, on eager
       systems, the Hugging Face peer: generate() and assisted generation with the
       other tokenizer.
Greedy: every method's output must equal target-only's; the table flags any that
differ. The analytic ceiling uses each drafter method's measured acceptance alpha,
its mean draft length k and the system's measured cost ratio c (Leviathan et al.).
Writes results.json, table.md and suite.png to --out.

    .venv/bin/python benchmarks/suite.py --out benchmarks/results/suite \\
        --bundle ~/.cache/omnidraft/bundles/et-fp32 --drafter default
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from omnidraft import corpora
from omnidraft.adaptation.online import AdaptConfig, OnlineAdapter
from omnidraft.adaptation.predictor import AcceptancePredictor
from omnidraft.errors import OmniDraftError
from omnidraft.adaptation.learners import learner_for
from omnidraft.pair import build_bundle_pair, build_eager_pair
from omnidraft.runtime.acceptance import AcceptanceHead
from omnidraft.runtime.decoding import GenerationConfig, SpeculativeDecoder
from omnidraft.runtime.drafting import DraftModel
from omnidraft.runtime.hybrid import Hybrid
from omnidraft.runtime.lookup import HistoryIndex
from omnidraft.runtime.lookup_proposer import LookupProposer
from omnidraft.runtime.ngram_cache import NGramCache
from omnidraft.runtime.stats import Totals

sys.path.insert(0, str(Path(__file__).parent))
from common import Method, ceiling, cost_ratio, hf_generate, save_results, summarize  # noqa: E402

PEERS = ("HF generate (target-only)", "HF assisted (other tokenizer)")
WORKLOADS = corpora.DOMAINS + corpora.WORKLOADS + (corpora.FIRST_CONTACT,)
# The four methods the regret table compares: the hybrid against each alone, prompt by prompt.
TARGET_ONLY, DRAFTER_ALONE, LOOKUP_ALONE, HYBRID = "target-only", "drafter", "lookup", "hybrid"


def systems(args) -> list[tuple[str, callable]]:
    """(label, loader) per system; loaders build the pair lazily (one system in memory at a time)."""
    out = []
    for drafter in [] if args.no_eager else (args.drafter or ["default"]):
        path = None if drafter == "default" else drafter
        name = "default drafter" if path is None else Path(path).name
        out.append((f"eager fp32, {name}", lambda p=path: build_eager_pair(args.target, p, use_ngram_cache=False,
                                                                             max_context=args.max_context)))
    for item in args.bundle:
        path, _, backend = item.partition(":")
        for b in [backend] if backend else ["executorch", "onnxruntime"]:
            out.append((f"{b}, {Path(path).name}", lambda p=path, b=b: _bundle_pair(p, b, args)))
    return out


def _bundle_pair(path: str, backend: str, args):
    from omnidraft.bundle import load_bundle

    bundle = load_bundle(path)
    graphs = bundle.model("target").graphs
    if (backend == "onnxruntime" and "onnx" not in graphs) or (backend == "executorch" and "executorch" not in graphs):
        return None
    trainable = args.extended and backend == "executorch" and bool(bundle.manifest.training)
    return build_bundle_pair(path, backend, threads=args.threads, use_ngram_cache=False, lora_drafter=trainable)


class Shadow:
    """Warm-up proposer: the drafter proposes every round while lookup is queried and judged beside it
    (its scorer learns what the target would have accepted, the texts join its history), and the
    hybrid's cost model measures the target and the drafter, as the costs file would hold them."""

    def __init__(self, hybrid: Hybrid):
        self.hybrid = hybrid
        self.lookup, self.drafting = hybrid.lookup, hybrid.drafting  # what the decoder and the adapter read

    def begin(self, seq, config, rng, learn=True):
        self.lookup.begin(seq, config, rng, learn)
        self.drafting.begin(seq, config, rng, learn)

    def propose(self, seq, budget, after=None):
        self.lookup.propose(seq, budget)  # judged against what the target commits
        return self.drafting.propose(seq, budget)

    def observe(self, seq, rnd):
        self.hybrid.observe(seq, rnd)

    def end(self, weights_changed=False, remember=True):
        return self.hybrid.end(weights_changed, remember)


def encode(pair, item, workload: str) -> list[int]:
    if isinstance(item, list):  # a conversation
        return pair.encode_chat(item)
    return pair.encode_prompt(item, chat=workload == "chat")


def is_chat(item, workload: str) -> bool:
    return isinstance(item, list) or workload == "chat"


def fits(pair, ids, args) -> bool:
    return len(ids) + args.max_new_tokens + 1 < pair.decoder.target.max_context


def warm_up(pair, learner, zero_lora, workload: str, args, bar) -> tuple:
    """The workload's warm-up stream with everything learning: (cache, predictor, lookup, lora state, adapter)."""
    dec = pair.decoder
    drafter = pair.drafter
    predictor = None
    if drafter.has_head:
        drafter.head = AcceptanceHead.initial(drafter.head.n_features)
        predictor = AcceptancePredictor(drafter.head)
    drafting = DraftModel(drafter, pair.bridge, NGramCache(pair.bridge.pair_id), predictor)
    lookup = LookupProposer(HistoryIndex())
    adapter = None
    if learner is not None:
        learner.load_state(zero_lora)
        drafter.reset()
        adapter = OnlineAdapter(learner, pair.bridge, AdaptConfig(lr=args.adapt_lr))
    hybrid = Hybrid(lookup, drafting)
    warm = SpeculativeDecoder(dec.target, pair.target_vocab, Shadow(hybrid), adapter)
    draft = _auto(args) if drafter.has_head else dict(draft_len=args.draft_len)
    for item in corpora.workload(workload, args.warmup, split="adapt", max_chars=args.prompt_chars):
        ids = encode(pair, item, workload)
        if fits(pair, ids, args):
            eos = pair.eos_ids(is_chat(item, workload))
            s = warm.generate(ids, GenerationConfig(args.max_new_tokens, eos_ids=eos, **draft)).stats
            bar.set_postfix_str(f"{workload} warm-up acc {s.acceptance_rate:.2f}")
        bar.update()
    lora = learner.state() if learner is not None else None
    return drafting.ngram_cache, predictor, lookup, lora, adapter, hybrid.state()


def _auto(args) -> dict:
    return dict(draft_policy="auto", max_draft_len=args.cap, gamma=args.gamma)


def make_methods(pair, args, learner, zero_lora, warm) -> dict[str, Method]:
    cache, predictor, lookup, lora, _, costs = warm
    drafter = pair.drafter
    draft = _auto(args) if drafter.has_head else dict(draft_len=args.draft_len)
    length = "auto" if drafter.has_head else f"k={args.draft_len}"
    methods = {"target-only": Method(pair, None, role=TARGET_ONLY)}
    if args.extended:
        fixed = dict(draft_len=args.draft_len)
        methods[f"k={args.draft_len}, no n-gram cache"] = Method(pair, fixed, None, predictor, learner, zero_lora)
        methods[f"k={args.draft_len} + n-gram cache"] = Method(pair, fixed, cache, predictor, learner, zero_lora)
    methods[f"drafter ({length} + n-gram cache)"] = Method(pair, draft, cache, predictor, learner, zero_lora,
                                                           role=DRAFTER_ALONE)
    methods["lookup"] = Method(pair, draft, proposer="lookup", lookup=lookup, role=LOOKUP_ALONE)
    methods[f"hybrid (lookup + drafter {length})"] = Method(pair, draft, cache, predictor, learner, zero_lora,
                                                            proposer="hybrid", lookup=lookup, costs=costs, role=HYBRID)
    if args.extended and learner is not None:
        methods[f"adapted: LoRA + {length} + cache"] = Method(pair, draft, cache, predictor, learner, lora)
    return methods


def empty_state(pair, learner, zero_lora) -> tuple:
    """What a fresh $OMNIDRAFT_HOME holds: no n-gram cache entries, the head's prior, no lookup history, no
    measured costs, the pretrained drafter (the warm-up's return shape)."""
    dec = pair.decoder
    predictor = None
    if pair.drafter.has_head:
        predictor = AcceptancePredictor(AcceptanceHead.initial(pair.drafter.head.n_features))
    if learner is not None:
        learner.load_state(zero_lora)
    return NGramCache(pair.bridge.pair_id), predictor, LookupProposer(HistoryIndex()), zero_lora, None, None


def measure(methods: dict[str, Method], ids, eos, max_new: int, sampling: dict | None = None) -> None:
    """Every method on one prompt, interleaved; outputs compared with the first method's (target-only): under
    sampling too, with the same seed (the drafter's drafts are its most likely tokens, checked against each
    position's own draw: the text is target-only's whoever proposed, verify.py)."""
    reference = None
    for method in methods.values():
        tokens = method.run(ids, max_new, eos, sampling)
        reference = tokens if reference is None else reference
        method.differ += tokens != reference


def sampling(args, ids) -> dict | None:
    """The measured prompts' sampling settings: greedy, or --temperature/--top-p with a seed per prompt."""
    if not args.temperature:
        return None
    from omnidraft.runtime.sampling import Sampler

    return {"sampler": Sampler(args.temperature, args.top_p), "seed": args.seed + sum(ids) % 100_003}


def run_system(label: str, pair, args, bar) -> dict:
    dec = pair.decoder
    drafter = pair.drafter
    n = min(64, dec.target.max_context // 2)
    prefix = pair.encode_prompt(corpora.prompts("prose", 1, seed=9)[0])[:n]
    c, step, _ = cost_ratio(dec.target, drafter, prefix, pair.bridge.draft_prompt(prefix)[:n])
    learner, zero_lora, why_not = None, None, "not measured (--extended adds it)"
    if args.extended:
        try:
            learner = OnlineAdapter(learner_for(pair.bundle, pair.drafting, AdaptConfig(lr=args.adapt_lr)), pair.bridge,
                                    AdaptConfig(lr=args.adapt_lr)).learner
            zero_lora = learner.state()
            why_not = "lora"
        except OmniDraftError as e:
            why_not = str(e)
    peers = args.extended and args.peers and hasattr(drafter, "model")
    groups: dict[str, dict[str, list]] = {}  # group -> method -> [Totals, outputs differing]
    out = {"system": label, "backend": dec.target.backend, "drafter": pair.drafter_name, "target": pair.target_name,
           "cost_ratio_c": c, "target_step_ms": step, "adaptation": why_not, "workloads": {}}
    for workload in args.workloads:
        if workload == corpora.FIRST_CONTACT:
            methods = first_contact(pair, args, learner, zero_lora, bar)
            runs = {name: [m.totals, m.differ] for name, m in methods.items()}
            base_tps = methods["target-only"].totals.tokens_per_s
            rows = {name: _row(name, t, differ, base_tps, c) for name, (t, differ) in runs.items()}
            out["workloads"][workload] = {"methods": rows, "adaptation": None, "regret": regret(methods)}
            groups[_group(workload)] = {name: [t, differ] for name, (t, differ) in runs.items()}
            continue
        warm = warm_up(pair, learner, zero_lora, workload, args, bar)
        methods = make_methods(pair, args, learner, zero_lora, warm)
        peer_runs = {name: [Totals(), 0] for name in (PEERS if peers else ())}
        for item in corpora.workload(workload, args.prompts, args.seed, "eval", args.prompt_chars):
            ids = encode(pair, item, workload)
            eos = pair.eos_ids(is_chat(item, workload))
            if not fits(pair, ids, args):
                bar.update()
                continue
            measure(methods, ids, eos, args.max_new_tokens, sampling(args, ids))
            reference = methods["target-only"].tokens
            if peers:
                if learner is not None:
                    learner.load_state(zero_lora)  # the peer drafts with the pretrained drafter
                hf_target, hf_drafter = dec.target.model, drafter.model
                for name, assist in zip(PEERS, ({}, dict(assistant_model=hf_drafter, tokenizer=pair.target_vocab.tokenizer,
                                                          assistant_tokenizer=pair.bridge.draft.tokenizer))):
                    tokens, seconds = hf_generate(hf_target, ids, eos, args.max_new_tokens, **assist)
                    peer_runs[name][0] += Totals(generations=1, new_tokens=len(tokens), decode_s=seconds)
                    peer_runs[name][1] += tokens != reference
            bar.set_postfix_str(f"{workload} " + " ".join(f"{m.totals.tokens_per_s:.1f}" for m in methods.values())
                                + " tok/s")
            bar.update()
        runs = {name: [m.totals, m.differ] for name, m in methods.items()} | peer_runs
        base_tps = methods["target-only"].totals.tokens_per_s
        rows = {name: _row(name, t, differ, base_tps, c) for name, (t, differ) in runs.items()}
        adapter = warm[4]
        out["workloads"][workload] = {"methods": rows, "adaptation": adapter.report() if adapter is not None else None,
                                      "regret": regret(methods)}
        for name, (t, differ) in runs.items():
            total = groups.setdefault(_group(workload), {}).setdefault(name, [Totals(), 0])
            total[0] += t
            total[1] += differ
    out["groups"] = {}
    for group, runs in groups.items():
        base_tps = runs["target-only"][0].tokens_per_s
        out["groups"][group] = {name: _row(name, t, differ, base_tps, c) for name, (t, differ) in runs.items()}
    return out


def first_contact(pair, args, learner, zero_lora, bar) -> dict[str, Method]:
    """Each prompt met by every method from an empty state (as in a fresh $OMNIDRAFT_HOME), in a process
    whose kernels are warm (a throwaway generation first); the methods' totals over the prompts."""
    items = corpora.workload(corpora.FIRST_CONTACT, args.first_contact, args.seed, "eval", args.prompt_chars)
    warm = make_methods(pair, args, learner, zero_lora, empty_state(pair, learner, zero_lora))
    measure(warm, encode(pair, items[-1], "first-contact"), pair.eos_ids(), 8)  # warm kernels, not state
    totals: dict[str, Method] | None = None
    for item in items:
        ids = encode(pair, item, "first-contact")
        if not fits(pair, ids, args):
            bar.update()
            continue
        methods = make_methods(pair, args, learner, zero_lora, empty_state(pair, learner, zero_lora))
        measure(methods, ids, pair.eos_ids(), args.first_contact_tokens, sampling(args, ids))
        for _ in range(args.first_contact_repeats - 1):  # again, each from an empty state: one prompt, summed
            again = make_methods(pair, args, learner, zero_lora, empty_state(pair, learner, zero_lora))
            measure(again, ids, pair.eos_ids(), args.first_contact_tokens, sampling(args, ids))
            for name, m in again.items():
                methods[name].absorb(m, same_prompt=True)
        if totals is None:
            totals = methods
        else:
            for name, m in methods.items():
                totals[name].absorb(m)
        bar.set_postfix_str("first contact " + " ".join(f"{m.totals.tokens_per_s:.1f}" for m in totals.values())
                            + " tok/s")
        bar.update()
    return totals or {}


def regret(methods: dict[str, Method]) -> dict | None:
    """The hybrid against target-only and against the best of target-only, lookup alone and the drafter
    alone: over the workload (tok/s of the summed prompts) and per prompt (the worst prompt), and who
    proposed the emitted tokens."""
    by_role = {m.role: m for m in methods.values() if m.role}
    if set(by_role) != {TARGET_ONLY, DRAFTER_ALONE, LOOKUP_ALONE, HYBRID}:
        return None
    others = [by_role[r] for r in (TARGET_ONLY, DRAFTER_ALONE, LOOKUP_ALONE)]
    hybrid = by_role[HYBRID]
    tps = lambda t: t.tokens_per_s  # noqa: E731
    best = max(others, key=lambda m: tps(m.totals))
    per_prompt = []
    for i, h in enumerate(hybrid.per_prompt):
        rates = {m.role: tps(m.per_prompt[i]) for m in others}
        top = max(rates, key=rates.get)
        per_prompt.append({"hybrid": tps(h), **rates, "vs_target_only": tps(h) / rates[TARGET_ONLY],
                           "vs_best": tps(h) / rates[top], "best": top})
    t = hybrid.totals
    drafter_accepted = t.accepted - t.lookup_accepted
    return {"vs_target_only": tps(t) / tps(by_role[TARGET_ONLY].totals), "vs_best": tps(t) / tps(best.totals),
            "best": best.role, "worst_prompt": min(per_prompt, key=lambda p: p["vs_best"]) if per_prompt else None,
            "per_prompt": per_prompt,
            "shares": {"lookup": t.lookup_accepted / max(t.new_tokens, 1),
                       "drafter": drafter_accepted / max(t.new_tokens, 1),
                       "target": (t.new_tokens - t.accepted) / max(t.new_tokens, 1)}}


def _row(name: str, t, differ: int, base_tps: float, c: float) -> dict:
    row = summarize(t, differ, base_tps)
    if name in PEERS:
        row["tokens_per_target_call"] = None
    elif row["acceptance_rate"] is not None and name.startswith(("drafter", "k=", "adapted")):
        row["ceiling"] = ceiling(row["acceptance_rate"], row["mean_draft_len"], c)
    return row


def _group(workload: str) -> str:
    if workload == corpora.FIRST_CONTACT:
        return "first contact"
    return "open-ended" if workload in corpora.DOMAINS else "repetitive"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--drafter", action="append", help="eager system's drafter folder, or 'default' (repeatable)")
    ap.add_argument("--target", help="eager systems' target folder (default: Gemma-3-270M)")
    ap.add_argument("--no-eager", action="store_true", help="only the bundles")
    ap.add_argument("--bundle", action="append", default=[], help="DIR or DIR:backend (default: every backend it has)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated domains and workloads")
    ap.add_argument("--warmup", type=int, default=8, help="warm-up prompts per workload (adapt split)")
    ap.add_argument("--prompts", type=int, default=4, help="measured prompts per workload (eval split)")
    ap.add_argument("--first-contact", type=int, default=8,
                    help="prompts of the first-contact workload (each from an empty state; the demo's first)")
    ap.add_argument("--first-contact-tokens", type=int, default=48, help="new tokens per first-contact prompt")
    ap.add_argument("--first-contact-repeats", type=int, default=1,
                    help="runs of each first-contact prompt (each from an empty state; per-prompt figures sum them)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--max-context", type=int, default=512, help="eager systems' target context")
    ap.add_argument("--draft-len", type=int, default=4, help="k of the fixed-length methods")
    ap.add_argument("--cap", type=int, default=8, help="longest draft of 'auto' (bundles: at most their maximum)")
    ap.add_argument("--gamma", type=float, default=0.5)
    ap.add_argument("--adapt-lr", type=float, default=3e-4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="sample the measured prompts (a seed per prompt); outputs are still checked against target-only")
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--prompt-chars", type=int, default=1200, help="longest prompt text")
    ap.add_argument("--extended", action="store_true",
                    help="also fixed k with/without the n-gram cache, LoRA-adapted, and the Hugging Face peers")
    ap.add_argument("--no-peers", dest="peers", action="store_false", help="with --extended: skip Hugging Face")
    args = ap.parse_args()
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in args.workloads if w not in WORKLOADS]
    if unknown:
        ap.error(f"unknown workloads {unknown}; choose from {', '.join(WORKLOADS)}")
    if args.temperature < 0 or not 0 < args.top_p <= 1:
        ap.error("--temperature must be >= 0 and --top-p in (0, 1]")
    torch.set_num_threads(args.threads)
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    chosen = systems(args)
    result = {"command": " ".join(["benchmarks/suite.py", *sys.argv[1:]]), "threads": args.threads,
              "date": time.strftime("%Y-%m-%d"), "warmup": args.warmup, "prompts": args.prompts,
              "max_new_tokens": args.max_new_tokens, "draft_len": args.draft_len, "cap": args.cap,
              "gamma": args.gamma, "workloads": args.workloads, "temperature": args.temperature, "top_p": args.top_p,
              "systems": []}
    per_system = sum(args.first_contact if w == corpora.FIRST_CONTACT else args.warmup + args.prompts
                     for w in args.workloads)
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
        f"Benchmark suite, " + (f"temperature {r['temperature']}, top-p {r['top_p']} (a seed per prompt)"
                                 if r.get("temperature") else "greedy") + f", {r['max_new_tokens']} new tokens, {r['threads']} threads, {r['date']}: per workload "
        f"{r['warmup']} warm-up prompts (n-gram cache, acceptance head and lookup scorer learn; the texts join the "
        f"lookup history), then {r['prompts']} measured prompts, all methods interleaved prompt by prompt. Speedup is "
        f"against the same system's target-only decoding. Lookup share: share of the output tokens that were "
        f"accepted lookup proposals. Lookup cost: mean index query per round, as a share of a target step. Ceiling "
        f"(drafter rows) = (1 - a^(k+1)) / ((1 - a)(k c + 1)) at the measured acceptance a, mean draft length k and "
        f"cost ratio c (c: median ratio of drafter to target one-token steps, timed in turns after loading). "
        f"Command: `{r['command']}`.",
        "",
        "| system | c | workloads | method | tok/s | vs target-only | tokens / target call | acceptance | "
        "lookup share | lookup cost | ceiling | outputs differing |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in r["systems"]:
        for group, rows in s["groups"].items():
            for name, m in rows.items():
                flag = " **(differ!)**" if m["outputs_differing"] else ""
                cost = m.get("lookup_query_ms")
                cost = f"{cost:.2f} ms ({100 * cost / s['target_step_ms']:.2f}%)" if cost is not None else "-"
                lines.append(f"| {s['system']} | {s['cost_ratio_c']:.2f} | {group} | {name} | {m['tokens_per_s']:.2f} | "
                             f"{m['speedup']:.2f}x | {_fmt(m['tokens_per_target_call'])} | {_fmt(m['acceptance_rate'])} | "
                             f"{m['lookup_share']:.2f} | {cost} | {_fmt(m.get('ceiling'), '.2f', 'x')} | "
                             f"{m['outputs_differing']}{flag} |")
    workloads = r["workloads"]
    lines += ["", "Per workload, tok/s (vs target-only):", "",
              "| system | method | " + " | ".join(workloads) + " |", "|---|---|" + "---|" * len(workloads)]
    for s in r["systems"]:
        names = list(next(iter(s["workloads"].values()))["methods"]) if s["workloads"] else []
        for name in names:
            cells = []
            for w in workloads:
                m = s["workloads"].get(w, {}).get("methods", {}).get(name)
                cells.append(f"{m['tokens_per_s']:.2f} ({m['speedup']:.2f}x)" if m and m["speedup"] else "-")
            lines.append(f"| {s['system']} | {name} | " + " | ".join(cells) + " |")
    lines += ["", "Regret: the hybrid against target-only and against the best of target-only, lookup alone and "
              "the drafter alone (tok/s over the workload's prompts), its worst prompt against that prompt's best "
              "of the three, and who proposed the hybrid's output tokens (lookup / drafter / the target itself):",
              "", "| system | workload | hybrid vs target-only | vs best single | worst prompt vs its best | "
              "tokens from lookup / drafter / target |", "|---|---|---|---|---|---|"]
    for s in r["systems"]:
        for w, d in s["workloads"].items():
            g = d.get("regret")
            if not g:
                continue
            worst = g["worst_prompt"]
            worst = f"{worst['vs_best']:.2f}x (best: {worst['best']})" if worst else "-"
            sh = g["shares"]
            lines.append(f"| {s['system']} | {w} | {g['vs_target_only']:.2f}x | {g['vs_best']:.2f}x ({g['best']}) | "
                         f"{worst} | {sh['lookup']:.2f} / {sh['drafter']:.2f} / {sh['target']:.2f} |")
    adapted = [(s, w, d["adaptation"]) for s in r["systems"] for w, d in s["workloads"].items() if d["adaptation"]]
    if adapted:
        lines += ["", "LoRA updates during the warm-ups (paused while measuring):", "",
                  "| system | workload | updates (rolled back) | s / step |", "|---|---|---|---|"]
        for s, w, a in adapted:
            lines.append(f"| {s['system']} | {w} | {a['updates']} ({a['rollbacks']}) | {a['seconds_per_step']:.1f} |")
    return "\n".join(lines) + "\n"


def plot(r: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from omnidraft.atomic import write_bytes_atomic

    panels = [(s, group) for s in r["systems"] for group in s["groups"]]
    if not panels:
        return
    cols = min(2, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(7 * cols, 4 * rows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (s, group) in zip(axes.flat, panels):
        methods = s["groups"][group]
        names = list(methods)
        y = range(len(names))
        ax.barh(list(y), [methods[n]["speedup"] for n in names], color="tab:blue", label="measured")
        ceil = [(i, methods[n]["ceiling"]) for i, n in enumerate(names) if "ceiling" in methods[n]]
        if ceil:
            ax.plot([v for _, v in ceil], [i for i, _ in ceil], "k|", markersize=14, label="analytic ceiling (drafter)")
        ax.axvline(1.0, color="black", lw=0.8)
        ax.set_yticks(list(y), names)
        ax.invert_yaxis()
        ax.set(title=f"{s['system']}: {group} (c = {s['cost_ratio_c']:.2f})", xlabel="speedup vs target-only")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right")
    fig.suptitle(f"greedy, {r['max_new_tokens']} new tokens, {r['threads']} threads, {r['date']}")
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    write_bytes_atomic(path, tmp.read_bytes())
    tmp.unlink()


if __name__ == "__main__":
    sys.exit(main())
