"""The command line's shared options, declared once, and their translation into configs.

generate, adapt and simulate share the pair options (models or bundle, backend,
threads, who proposes, draft length, learned state) and the sampling options;
`pair_options(args)` turns them into the PairOptions that `pair.open_pair` builds
a pair from, and `generation_config(args, pair)` into a GenerationConfig.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .errors import OmniDraftError
from .progress import log
from .runtime.choices import Backend, DraftPolicy, ProposerKind


def int_at_least(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from None
    if not 0 < value <= 1:  # nan and inf too
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def fraction(text: str) -> float:
    value = non_negative_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text}")
    return value


def open_probability(text: str) -> float:
    value = non_negative_float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), got {text}")
    return value


def draft_len(text: str) -> int | DraftPolicy:
    if text in (DraftPolicy.AUTO, DraftPolicy.HEURISTIC):
        return DraftPolicy(text)
    if not text.strip().lstrip("+-").isdigit():
        raise argparse.ArgumentTypeError(f"expected a number, 'auto' or 'heuristic', got {text!r}")
    return positive_int(text)


def read_text(path: Path, what: str) -> str:
    """A UTF-8 text file the user named (`what`: "prompt file", "script file", ...), one clear error otherwise."""
    try:
        return Path(path).read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise OmniDraftError(f"{what} not found: {path}") from None
    except OSError as e:
        raise OmniDraftError(f"cannot read {what} {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise OmniDraftError(f"{what} {path} is not valid UTF-8 (byte {e.start})") from None


# -- option groups --------------------------------------------------------------------------
def add_model_options(p, backends=tuple(Backend), eager_models: bool = True) -> None:
    if eager_models:
        p.add_argument("--target", help="target checkpoint folder (default: Gemma-3-270M)")
        p.add_argument("--drafter", help="drafter checkpoint folder, small (the shipped small drafter) or "
                       "smollm2-135m-instruct (default: small with the default target, SmolLM2-135M-Instruct with "
                       "any other)")
        p.add_argument("--max-context", type=positive_int, default=4096, help="target KV cache length (eager)")
    if len(backends) > 1:
        p.add_argument("--backend", choices=backends, default=backends[0])
    p.add_argument("--bundle", type=Path, required=not eager_models,
                   help="exported bundle folder (executorch and onnxruntime backends)")
    p.add_argument("--threads", type=positive_int, help="intra-op threads (at most the machine's cores)")
    p.add_argument("--no-ngram-cache", action="store_true", help="direct vocabulary mapping only")


def add_sampling_options(p) -> None:
    p.add_argument("--temperature", type=non_negative_float, default=0.0, help="0 = greedy (exact)")
    p.add_argument("--top-p", type=probability, default=1.0)
    p.add_argument("--seed", type=int, default=0, help="sampling seed (a stream's n-th prompt uses seed + n)")
    p.add_argument("--sampled-drafts", action="store_true",
                   help="under sampling the drafter samples its drafts, verified by rejection sampling (the paper's "
                        "method); by default it proposes its most likely tokens, verified against each position's "
                        "own draw, so a seed repeats whoever proposed (docs/exactness.md)")
    p.add_argument("--strict-sampling", action="store_true",
                   help="with sampled drafts, cross-vocabulary sampling exactly lossless (direct mappings only, no "
                        "n-gram merges; implies --sampled-drafts)")


def add_proposal_options(p) -> None:
    p.add_argument("--proposer", choices=tuple(ProposerKind), default=ProposerKind.HYBRID,
                   help="who proposes tokens: each round the better of lookup and the drafter (hybrid), "
                        "the drafter alone, or lookup alone (no drafter loaded)")
    p.add_argument("--no-history", action="store_true",
                   help="lookup searches only the current text: the profile's history is neither read nor written")
    p.add_argument("--private", action="store_true",
                   help="write nothing derived from the prompt or the output: no history, n-gram cache entries, "
                        "measured costs or acceptance head (what earlier runs learned is still read)")
    p.add_argument("--history-tokens", type=non_negative_int, default=1_000_000,
                   help="most tokens of past prompts and outputs kept for lookup (oldest dropped)")
    p.add_argument("--draft-len", type=draft_len, default=None, metavar="{N,auto,heuristic}",
                   help="draft tokens per round: a fixed N, 'auto' (acceptance head; the default when the "
                        "drafter has one) or 'heuristic' (+2/-1)")
    p.add_argument("--max-draft-len", type=positive_int, default=None,
                   help="cap of 'auto' and 'heuristic' (default 8, or a bundle's exported maximum if smaller)")
    p.add_argument("--gamma", type=open_probability, default=0.5,
                   help="'auto' stops drafting once P(some draft token is rejected) > gamma")
    p.add_argument("--predictor-updates", choices=("each-prompt", "with-lora"), default="each-prompt",
                   help="when the acceptance head trains: after every prompt, or with each LoRA update")


FULL_FINETUNE_LR = 3e-5  # every weight moves: a far smaller step than LoRA's (benchmarks/adaptation.py --lr-full)


def add_adapt_options(p, always: bool = False) -> None:
    if not always:
        p.add_argument("--adapt", action="store_true",
                       help="adapt the drafter online (eager, or executorch with a bundle exported --with-training)")
    p.add_argument("--profile", default="default",
                   help="whose learned state: adapter, acceptance head and lookup history (one set per profile)")
    p.add_argument("--reset-adaptation", action="store_true",
                   help="set the profile's learned state aside and start fresh")
    from .adaptation.lora import LoRAConfig
    from .adaptation.online import AdaptConfig

    lora, adapt = LoRAConfig(), AdaptConfig()
    p.add_argument("--lora-rank", type=positive_int, default=lora.rank)
    p.add_argument("--lora-alpha", type=non_negative_float, default=lora.alpha)
    p.add_argument("--lora-targets", default=",".join(lora.targets), help="comma-separated Linear module names to adapt")
    p.add_argument("--full-finetune", action="store_true", help="train every drafter weight instead of LoRA")
    p.add_argument("--adapt-every", type=positive_int, default=adapt.every, help="prompts between updates")
    p.add_argument("--adapt-lr", type=non_negative_float,
                   help=f"learning rate (default {adapt.lr:g}; {FULL_FINETUNE_LR:g} with --full-finetune)")
    p.add_argument("--adapt-lambda", type=non_negative_float, default=adapt.lam, help="weight of the n-gram NLL term")


# -- translations ---------------------------------------------------------------------------
def adapt_config(args):
    from .adaptation.lora import LoRAConfig
    from .adaptation.online import AdaptConfig

    targets = tuple(t.strip() for t in args.lora_targets.split(",") if t.strip())
    try:
        lora = None if args.full_finetune else LoRAConfig(args.lora_rank, args.lora_alpha, targets)
        lr = args.adapt_lr if args.adapt_lr is not None else FULL_FINETUNE_LR if lora is None else AdaptConfig().lr
        return AdaptConfig(lora=lora, lr=lr, every=args.adapt_every, lam=args.adapt_lambda)
    except ValueError as e:
        raise OmniDraftError(str(e)) from None


def threads(requested: int | None) -> int | None:
    """The thread count to use: at most the machine's cores (more only slows a CPU down), with a warning."""
    cores = os.cpu_count() or 1
    if requested is not None and requested > cores:
        log(f"[omnidraft] warning: --threads {requested} is more than this machine's {cores} cores; using {cores}")
        return cores
    return requested


def pair_options(args, speculative: bool = True, adapt: bool = False, **overrides):
    """PairOptions from the shared options (overrides: what a command fixes, e.g. the simulator's backend)."""
    from .adaptation.predictor import PredictorConfig
    from .pair import PairOptions

    fields = dict(
        target=getattr(args, "target", None), drafter=getattr(args, "drafter", None),
        backend=getattr(args, "backend", Backend.EAGER), bundle=args.bundle, threads=args.threads,
        max_context=getattr(args, "max_context", 4096), speculative=speculative, proposer=args.proposer,
        use_ngram_cache=not args.no_ngram_cache, use_history=not args.no_history,
        history_tokens=args.history_tokens, draft_len=args.draft_len, max_draft_len=args.max_draft_len,
        gamma=args.gamma, predictor=PredictorConfig(schedule=args.predictor_updates),
        adapt=adapt_config(args) if adapt else None, profile=args.profile, reset=args.reset_adaptation,
        private=getattr(args, "private", False))
    return PairOptions(**{**fields, **overrides})


def generation_config(args, pair, chat: bool, **fields):
    """A GenerationConfig from the options (request.generation_config: the pair's draft length and end-of-turn ids)."""
    from .request import generation_config

    return generation_config(pair, chat, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                             top_p=args.top_p, seed=args.seed, strict_sampling=args.strict_sampling,
                             sampled_drafts=args.sampled_drafts, **fields)


SOURCE_COLOURS = {"lookup": "\033[36m", "drafter": "\033[32m"}  # the target's own tokens stay uncoloured


def add_source_option(p) -> None:
    p.add_argument("--show-sources", action="store_true",
                   help="colour each token by who proposed it: lookup, the drafter, or the target itself")


def source_writer(show: bool, out):
    """write(piece, source) for streamed text: coloured by source when asked and `out` is a terminal (a
    one-line legend goes to stderr first), plain otherwise (with a warning when asked)."""
    colour = show and out.isatty()
    if show and not colour:
        log("[omnidraft] warning: --show-sources colours a terminal; the output is not one, so it is plain")
    if colour:
        legend = "  ".join(f"{c}{name}\033[0m" for name, c in SOURCE_COLOURS.items())
        print(f"[sources] {legend}  target (its own token)", file=sys.stderr)

    def write(piece: str, source: str) -> None:
        c = SOURCE_COLOURS.get(source) if colour else None
        out.write(f"{c}{piece}\033[0m" if c else piece)
        out.flush()

    return write


def timing_parts(stats) -> list[str]:
    """['target step 94 ms', 'verify 120 ms', 'drafter step 60 ms (c 0.64)']: what the pair costs here (medians)."""
    t = stats.timings
    parts = [f"{label} {ms:.0f} ms" for ms, label in ((t.target_step_ms, "target step"), (t.target_verify_ms, "verify"),
                                                     (t.drafter_step_ms, "drafter step")) if ms is not None]
    if t.cost_ratio_c is not None:
        parts[-1] += f" (c {t.cost_ratio_c:.2f})"
    return parts


def proposal_summary(stats) -> str:
    """'lookup 12/15, drafter 3/8': accepted/proposed tokens per proposer."""
    parts = [f"{source} {c.accepted}/{c.proposed}" for source, c in sorted(stats.by_source.items())]
    return ", ".join(parts) or "none"
