"""The `omnidraft` command line.

Every user mistake ends in one line on stderr and a non-zero exit; tracebacks
are for bugs only (and even then shown only with OMNIDRAFT_DEBUG=1).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .errors import OmniDraftError

EXIT_USER_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not usage + error
        raise _UsageError(f"{self.prog}: {message}")


class _UsageError(Exception):
    pass


def _int_at_least(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


_positive_int = _int_at_least(1)
_non_negative_int = _int_at_least(0)


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def _probability(text: str) -> float:
    value = _non_negative_float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def _draft_len(text: str) -> int | str:
    if text in ("auto", "heuristic"):
        return text
    if not text.strip().lstrip("+-").isdigit():
        raise argparse.ArgumentTypeError(f"expected a number, 'auto' or 'heuristic', got {text!r}")
    return _positive_int(text)


def _open_probability(text: str) -> float:
    value = _non_negative_float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), got {text}")
    return value


def _add_sampling_options(p) -> None:
    p.add_argument("--temperature", type=_non_negative_float, default=0.0, help="0 = greedy (exact)")
    p.add_argument("--top-p", type=_probability, default=1.0)
    p.add_argument("--seed", type=int, default=0, help="sampling seed (a stream's n-th prompt uses seed + n)")
    p.add_argument("--strict-sampling", action="store_true",
                   help="cross-vocabulary sampling exactly lossless (direct mappings only, no n-gram merges)")


def _add_draft_options(p) -> None:
    p.add_argument("--proposer", choices=("hybrid", "drafter", "lookup"), default="hybrid",
                   help="who proposes tokens: each round the better of lookup and the drafter (hybrid), "
                        "the drafter alone, or lookup alone (no drafter loaded)")
    p.add_argument("--no-history", action="store_true",
                   help="lookup searches only the current text: the profile's history is neither read nor written")
    p.add_argument("--history-tokens", type=_non_negative_int, default=1_000_000,
                   help="most tokens of past prompts and outputs kept for lookup (oldest dropped)")
    p.add_argument("--draft-len", type=_draft_len, default=None, metavar="{N,auto,heuristic}",
                   help="draft tokens per round: a fixed N, 'auto' (acceptance head; the default when the "
                        "drafter has one) or 'heuristic' (+2/-1)")
    p.add_argument("--max-draft-len", type=_positive_int, default=None,
                   help="cap of 'auto' and 'heuristic' (default 8, or a bundle's exported maximum if smaller)")
    p.add_argument("--gamma", type=_open_probability, default=0.5,
                   help="'auto' stops drafting once P(some draft token is rejected) > gamma")
    p.add_argument("--predictor-updates", choices=("each-prompt", "with-lora"), default="each-prompt",
                   help="when the acceptance head trains: after every prompt, or with each LoRA update")


def draft_options(args) -> dict:
    """GenerationConfig's draft-length fields from the options (after resolve_draft_len)."""
    fixed = isinstance(args.draft_len, int)
    return {"draft_policy": "fixed" if fixed else args.draft_len, "draft_len": args.draft_len if fixed else 4,
            "max_draft_len": args.max_draft_len, "gamma": args.gamma}


def resolve_draft_len(args, pair) -> None:
    """Defaults that depend on the pair: 'auto' when the drafter has an acceptance head (else 4 per
    round), capped at 8 or the bundle's exported maximum; explicit values are checked against it."""
    bundle_max = pair.bundle.max_draft_len if pair.bundle is not None else None
    if args.max_draft_len is None:
        args.max_draft_len = min(8, bundle_max or 8)
    if args.draft_len is None:
        drafter = pair.decoder.drafter
        args.draft_len = "auto" if drafter is None or drafter.has_head else min(4, args.max_draft_len)
    if pair.bundle is not None:
        pair.bundle.check_draft_len(longest_draft(args))


def lookup_options(args):
    from .pair import LookupOptions

    return LookupOptions(profile=args.profile, use_history=not args.no_history, max_tokens=args.history_tokens,
                         reset=args.reset_adaptation)


def sampling_options(args) -> dict:
    """GenerationConfig's sampling fields from the options."""
    from .runtime.sampling import Sampler

    return {"sampler": Sampler(args.temperature, args.top_p), "seed": args.seed,
            "strict_sampling": args.strict_sampling}


def longest_draft(args) -> int:
    return args.draft_len if isinstance(args.draft_len, int) else args.max_draft_len


def proposal_summary(stats: dict) -> str:
    """'lookup 12/15, drafter 3/8' : accepted/proposed tokens per proposer."""
    parts = [f"{source} {c['accepted']}/{c['proposed']}" for source, c in stats.get("proposals", {}).items()]
    return ", ".join(parts) or "none"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="omnidraft", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    gen = sub.add_parser("generate", help="generate text with speculative decoding")
    src = gen.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="the prompt text")
    src.add_argument("--prompt-file", type=Path, help="read the prompt from a UTF-8 file")
    gen.add_argument("--max-new-tokens", type=_positive_int, default=64)
    _add_sampling_options(gen)
    _add_draft_options(gen)
    gen.add_argument("--chat", action="store_true", help="apply the target's chat template")
    gen.add_argument("--stop", action="append", default=[], metavar="TEXT", help="stop string (repeatable)")
    gen.add_argument("--no-speculation", action="store_true", help="target-only baseline, same runner")
    gen.add_argument("--target", help="target checkpoint folder (default: Gemma-3-270M)")
    gen.add_argument("--drafter", help="drafter checkpoint folder (default: SmolLM2-135M-Instruct)")
    gen.add_argument("--max-context", type=_positive_int, default=512, help="target KV cache length")
    gen.add_argument("--no-ngram-cache", action="store_true", help="direct vocabulary mapping only")
    gen.add_argument("--threads", type=_positive_int, help="torch intra-op threads")
    gen.add_argument("--json", action="store_true", help="print one JSON object instead of streaming")
    gen.add_argument("--backend", choices=("eager", "executorch", "onnxruntime"), default="eager")
    gen.add_argument("--bundle", type=Path, help="exported bundle folder (executorch and onnxruntime backends)")
    _add_adapt_options(gen)

    ad = sub.add_parser("adapt", help="adapt the drafter over a stream of prompts and report acceptance per window")
    ad.add_argument("--stream", type=Path, required=True, help="prompts: one per line, or JSONL ({\"prompt\": ...})")
    ad.add_argument("--eval", type=Path, help="held-out prompts (same format) measured before and after")
    ad.add_argument("--window", type=_positive_int, default=20, help="prompts per reported window")
    ad.add_argument("--max-new-tokens", type=_positive_int, default=32)
    _add_sampling_options(ad)
    _add_draft_options(ad)
    ad.add_argument("--chat", action="store_true", help="apply the target's chat template to every prompt")
    ad.add_argument("--target", help="target checkpoint folder (default: Gemma-3-270M)")
    ad.add_argument("--drafter", help="drafter checkpoint folder (default: SmolLM2-135M-Instruct)")
    ad.add_argument("--max-context", type=_positive_int, default=512)
    ad.add_argument("--threads", type=_positive_int, help="torch intra-op threads")
    ad.add_argument("--json", action="store_true", help="print one JSON object at the end")
    ad.add_argument("--backend", choices=("eager", "executorch"), default="eager",
                    help="executorch: update steps through the bundle's training program")
    ad.add_argument("--bundle", type=Path, help="bundle exported --with-training (executorch backend)")
    _add_adapt_options(ad, always=True)

    exp = sub.add_parser("export", help="export target and drafter into a bundle (.pte and/or .onnx)")
    exp.add_argument("--target", help="target checkpoint folder (default: Gemma-3-270M)")
    exp.add_argument("--drafter", help="drafter checkpoint folder (default: SmolLM2-135M-Instruct)")
    exp.add_argument("--out", type=Path, required=True, help="bundle folder to write")
    exp.add_argument("--format", choices=("executorch", "onnx", "both"), default="executorch")
    exp.add_argument("--quant", choices=("none", "8da4w", "8da8w", "int8"), default="none",
                     help="ExecuTorch: 8da4w (int4 weights) or 8da8w (int8 weights), dynamic int8 activations; "
                          "ONNX: int8 (int8 weights)")
    exp.add_argument("--max-context", type=_positive_int, default=512, help="target KV cache length")
    exp.add_argument("--max-draft-len", type=_positive_int, default=8, help="largest draft length K")
    exp.add_argument("--with-training", action="store_true",
                     help="also export the drafter's LoRA training step and a LoRA-input drafter (ExecuTorch)")
    exp.add_argument("--train-window", type=_positive_int, default=128, help="draft tokens per training window")

    sim = sub.add_parser("simulate", help="run a bundle on onnxruntime as the phone app does (chat)")
    sim.add_argument("--bundle", type=Path, required=True)
    sim.add_argument("--prompt", help="one prompt instead of the interactive chat")
    sim.add_argument("--chat", action="store_true", help="with --prompt: apply the chat template")
    sim.add_argument("--threads", type=_positive_int, help="onnxruntime intra-op threads")
    sim.add_argument("--report", type=Path, metavar="DIR", help="write report.json and PNG plots here")
    sim.add_argument("--max-new-tokens", type=_positive_int, default=128)
    _add_sampling_options(sim)
    _add_draft_options(sim)
    _add_adapt_options(sim)

    md = sub.add_parser("make-drafter", help="distil a small, fast drafter from a larger one")
    md.add_argument("--from", dest="source", help="teacher checkpoint (default: SmolLM2-135M-Instruct)")
    md.add_argument("--out", type=Path, required=True, help="checkpoint folder to write")
    md.add_argument("--layers", type=_positive_int, default=4, help="transformer layers to keep")
    md.add_argument("--corpus", default="code,prose,chat", help="comma-separated domains")
    md.add_argument("--tokens", type=_positive_int, default=400_000, help="training tokens")
    md.add_argument("--seq-len", type=_positive_int, default=128)
    md.add_argument("--batch", type=_positive_int, default=8)
    md.add_argument("--lr", type=_non_negative_float, default=1e-3)
    md.add_argument("--seed", type=int, default=0)
    md.add_argument("--checkpoint-every", type=_positive_int, default=50, help="steps between resumable checkpoints")
    md.add_argument("--restart", action="store_true", help="discard an existing checkpoint instead of resuming")
    md.add_argument("--head-tokens", type=_non_negative_int, default=16384,
                    help="draft head: score only the N most frequent tokens (0: the full vocabulary)")

    dh = sub.add_parser("draft-head", help="restrict a drafter's proposals to its N most frequent tokens (faster steps)")
    dh.add_argument("--drafter", required=True, help="drafter checkpoint folder (or 'smollm2-135m-instruct')")
    dh.add_argument("--tokens", type=_non_negative_int, required=True, help="tokens to keep (0: remove the draft head)")
    dh.add_argument("--corpus", default="code,prose,chat", help="comma-separated domains to rank tokens on")

    sub.add_parser("prepare", help="convert the default models into $OMNIDRAFT_HOME (one time)")
    return parser


def _add_adapt_options(p, always: bool = False) -> None:
    if not always:
        p.add_argument("--adapt", action="store_true", help="adapt the drafter online (eager, or executorch with a bundle exported --with-training)")
    p.add_argument("--profile", default="default", help="adapter profile name (one adapter per profile)")
    p.add_argument("--reset-adaptation", action="store_true", help="set the profile's adapter aside, start fresh")
    p.add_argument("--lora-rank", type=_positive_int, default=32)
    p.add_argument("--lora-alpha", type=_non_negative_float, default=64.0)
    p.add_argument("--lora-targets", default="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
                   help="comma-separated Linear module names to adapt")
    p.add_argument("--full-finetune", action="store_true", help="train every drafter weight instead of LoRA")
    p.add_argument("--adapt-every", type=_positive_int, default=4, help="prompts between updates")
    p.add_argument("--adapt-lr", type=_non_negative_float, default=3e-4)
    p.add_argument("--adapt-lambda", type=_non_negative_float, default=0.2, help="weight of the n-gram NLL term")


def adapt_config(args):
    from .adaptation.lora import LoRAConfig
    from .adaptation.online import AdaptConfig

    targets = tuple(t.strip() for t in args.lora_targets.split(",") if t.strip())
    try:
        lora = None if args.full_finetune else LoRAConfig(args.lora_rank, args.lora_alpha, targets)
        return AdaptConfig(lora=lora, lr=args.adapt_lr, every=args.adapt_every, lam=args.adapt_lambda)
    except ValueError as e:
        raise OmniDraftError(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.command == "generate":
            return cmd_generate(args)
        if args.command == "adapt":
            return cmd_adapt(args)
        if args.command == "prepare":
            return cmd_prepare(args)
        if args.command == "export":
            return cmd_export(args)
        if args.command == "make-drafter":
            return cmd_make_drafter(args)
        if args.command == "draft-head":
            return cmd_draft_head(args)
        if args.command == "simulate":
            _quiet_libraries()
            from .simulator import run

            return run(args)
    except _UsageError as e:
        print(e, file=sys.stderr)
        return EXIT_USAGE
    except OmniDraftError as e:
        print(f"omnidraft: error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("\nomnidraft: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:  # noqa: BLE001 - a bug; keep the user's terminal clean unless debugging
        if os.environ.get("OMNIDRAFT_DEBUG"):
            raise
        first = str(e).splitlines()[0] if str(e) else ""
        print(f"omnidraft: internal error: {type(e).__name__}: {first} (OMNIDRAFT_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 3
    return 0


def _quiet_libraries(progress_bars: bool = False) -> None:
    """Library chatter (deprecations, optional kernels not found) is not for users."""
    import logging
    import warnings

    import torch  # noqa: F401 - torch configures its loggers on import: quiet them after

    warnings.filterwarnings("ignore")
    quiet = ("torch", "torchao", "onnxscript", "onnx_ir", "executorch")
    for name in list(logging.root.manager.loggerDict):
        if name.split(".")[0] in quiet:
            logging.getLogger(name).setLevel(logging.ERROR)
    for name in quiet:
        logging.getLogger(name).setLevel(logging.ERROR)
    import transformers

    transformers.utils.logging.set_verbosity_error()
    if not progress_bars:
        transformers.utils.logging.disable_progress_bar()


def read_prompt(args) -> str:
    if args.prompt is not None:
        return args.prompt
    path: Path = args.prompt_file
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise OmniDraftError(f"prompt file not found: {path}") from None
    except OSError as e:
        raise OmniDraftError(f"cannot read prompt file {path}: {e.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise OmniDraftError(f"prompt file {path} is not valid UTF-8 (byte {e.start})") from None


def cmd_prepare(args) -> int:
    _quiet_libraries(progress_bars=True)  # GGUF conversion shows its own progress
    from .models import DEFAULT_DRAFTER, DEFAULT_TARGET, prepare_default_model

    for model in (DEFAULT_TARGET, DEFAULT_DRAFTER):
        path = prepare_default_model(model)
        print(f"{model.role}: {model.name} ready at {path}")
    return 0


def cmd_export(args) -> int:
    _quiet_libraries()
    from .export.build import export_bundle

    formats = ("executorch", "onnx") if args.format == "both" else (args.format,)
    export_bundle(
        args.out, args.target, args.drafter, formats=formats, quant=args.quant,
        max_context=args.max_context, max_draft_len=args.max_draft_len,
        with_training=args.with_training, train_window=args.train_window,
    )
    print(args.out)
    return 0


def cmd_make_drafter(args) -> int:
    _quiet_libraries()
    from .distill import DistillConfig, distill
    from .models import DEFAULT_DRAFTER, resolve_model_path

    domains = _domains(args.corpus)
    config = DistillConfig(layers=args.layers, tokens=args.tokens, seq_len=args.seq_len, batch=args.batch, lr=args.lr,
                           seed=args.seed, checkpoint_every=args.checkpoint_every, domains=domains)
    distill(resolve_model_path(args.source, DEFAULT_DRAFTER), args.out, config, restart=args.restart,
            head_tokens=args.head_tokens)
    return 0


def cmd_draft_head(args) -> int:
    _quiet_libraries()
    from .draft_head import write_head
    from .models import DEFAULT_DRAFTER, load_tokenizer, resolve_model_path

    path = resolve_model_path(args.drafter, DEFAULT_DRAFTER)
    write_head(path, load_tokenizer(path), args.tokens, _domains(args.corpus))
    return 0


def _domains(spec: str) -> tuple[str, ...]:
    from . import corpora

    domains = tuple(d.strip() for d in spec.split(",") if d.strip())
    unknown = [d for d in domains if d not in corpora.DOMAINS]
    if unknown or not domains:
        raise OmniDraftError(f"unknown corpus {','.join(unknown) or spec!r}; choose from {','.join(corpora.DOMAINS)}")
    return domains


def cmd_generate(args) -> int:
    prompt = read_prompt(args)
    if not prompt.strip():
        raise OmniDraftError("the prompt is empty")
    _quiet_libraries()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from .runtime.decoding import GenerationConfig

    pair = _open_pair(args, speculative=not args.no_speculation, use_ngram_cache=not args.no_ngram_cache,
                      adapt=args.adapt)
    ids = pair.encode_prompt(prompt, chat=args.chat)
    config = GenerationConfig(
        max_new_tokens=args.max_new_tokens,
        **draft_options(args),
        **sampling_options(args),
        stop_strings=tuple(args.stop),
        eos_ids=pair.eos_ids(args.chat),
        speculative=not args.no_speculation,
    )
    stream = None if args.json else (lambda piece: (sys.stdout.write(piece), sys.stdout.flush()))
    result = pair.decoder.generate(ids, config, on_text=stream)
    pair.save_cache()
    s = result.stats
    report = {
        "text": result.text,
        **{k: s[k] for k in ("new_tokens", "target_calls", "tokens_per_target_call", "drafted", "accepted")},
        "acceptance_rate": s["acceptance_rate"],
        "ngram_cache_hits": s["ngram_cache_hits"],
        "ngram_cache_size": s["ngram_cache_size"],
        "wall_s": s["wall_s"],
        "prefill_s": s["prefill_s"],
        "tokens_per_s": s["tokens_per_s"],
        "target": pair.target_name,
        "drafter": pair.drafter_name,
        "backend": pair.decoder.target.backend,
        "cross_vocab": pair.decoder.cross_vocab,
        "speculative": not args.no_speculation,
        "stop_reason": result.stop_reason,
        "prompt_tokens": len(ids),
        "draft_len": args.draft_len,
        "mean_draft_len": s["mean_draft_len"],
        "predictor": s.get("predictor"),
        "temperature": args.temperature,
        "threads": torch.get_num_threads(),
        "vocab_intersection": s["vocab_intersection"],
        "drafter_calls": s["drafter_calls"],
        "adaptation": s.get("adaptation"),
        "proposer": None if args.no_speculation else args.proposer,
        "proposals": s["proposals"],
        "lookup": s["lookup"],
        "hybrid": s["hybrid"],
    }
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        sys.stdout.write("\n")
        mode = "speculative" if report["speculative"] else "target-only"
        print(
            f"[{mode}] {s['new_tokens']} tokens in {s['decode_s']:.2f}s ({s['tokens_per_s']:.2f} tok/s), "
            f"{s['tokens_per_target_call']:.2f} tokens/target call, acceptance {s['acceptance_rate']:.2f} "
            f"(accepted/proposed: {proposal_summary(s)}), n-gram hits {s['ngram_cache_hits']}, "
            f"stop: {result.stop_reason}, threads {report['threads']}",
            file=sys.stderr,
        )
    return 0


def read_prompt_stream(path: Path) -> list[str]:
    """Prompts from a file: JSONL lines ({"prompt": ...} or a JSON string) or one plain prompt per line."""
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise OmniDraftError(f"prompt stream not found: {path}") from None
    except OSError as e:
        raise OmniDraftError(f"cannot read prompt stream {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise OmniDraftError(f"prompt stream {path} is not valid UTF-8 (byte {e.start})") from None
    prompts = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.lstrip()[:1] in ("{", '"'):
            try:
                item = json.loads(line)
            except json.JSONDecodeError as e:
                raise OmniDraftError(f"{path}:{n}: not valid JSON ({e.msg})") from None
            item = item.get("prompt") if isinstance(item, dict) else item
            if not isinstance(item, str) or not item.strip():
                raise OmniDraftError(f'{path}:{n}: expected {{"prompt": "..."}} or a JSON string')
            line = item
        prompts.append(line)
    if not prompts:
        raise OmniDraftError(f"prompt stream {path} holds no prompts")
    return prompts


def _open_pair(args, speculative: bool = True, use_ngram_cache: bool = True, adapt: bool = False):
    """The pair the options name (eager, or a bundle on its backend), with its adapter if asked."""
    from .adaptation.predictor import PredictorConfig
    from .pair import attach_adapter, attach_predictor, build_bundle_pair, build_eager_pair, check_profile

    if adapt:
        check_profile(args.profile)
    if adapt and args.proposer == "lookup":
        raise OmniDraftError("adaptation trains the drafter: use --proposer hybrid or drafter")
    proposers = dict(proposer=args.proposer, lookup=lookup_options(args))
    if args.backend == "eager":
        if args.bundle is not None:
            raise OmniDraftError("--bundle runs on --backend executorch or onnxruntime, not eager")
        pair = build_eager_pair(args.target, args.drafter, speculative=speculative, max_context=args.max_context,
                                use_ngram_cache=use_ngram_cache, **proposers)
    else:
        if args.bundle is None:
            raise OmniDraftError(f"--backend {args.backend} needs --bundle DIR (make one with `omnidraft export`)")
        if args.target or args.drafter:
            raise OmniDraftError("--target/--drafter do not apply to a bundle: its models are fixed at export")
        pair = build_bundle_pair(args.bundle, args.backend, speculative=speculative, threads=args.threads,
                                 use_ngram_cache=use_ngram_cache, lora_drafter=adapt, **proposers)
    resolve_draft_len(args, pair)
    if adapt:
        pair.adapter_path = attach_adapter(pair, adapt_config(args), args.profile, args.reset_adaptation)
    if speculative and args.draft_len == "auto" and pair.decoder.drafter is not None:
        attach_predictor(pair, PredictorConfig(schedule=args.predictor_updates), args.profile,
                         args.reset_adaptation)
    return pair


def cmd_adapt(args) -> int:
    stream_texts = read_prompt_stream(args.stream)
    eval_texts = read_prompt_stream(args.eval) if args.eval else []
    _quiet_libraries()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from .adaptation.stream import evaluate, run_stream
    from .runtime.decoding import GenerationConfig

    pair = _open_pair(args, adapt=True)
    path = pair.adapter_path
    encode = lambda texts: [pair.encode_prompt(t, chat=args.chat) for t in texts]  # noqa: E731
    stream, held = encode(stream_texts), encode(eval_texts)
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, eos_ids=pair.eos_ids(args.chat),
                              **sampling_options(args), **draft_options(args))
    dec = pair.decoder
    report = {"profile": args.profile, "adapter": str(path), "prompts": len(stream), "window": args.window,
              "threads": torch.get_num_threads(), "temperature": args.temperature,
              "strict_sampling": args.strict_sampling}
    if held:
        report["eval_before"] = evaluate(dec, held, config)[0]

    def progress(i, stats):
        a = stats["adaptation"]
        print(f"[{i + 1}/{len(stream)}] acceptance {stats['acceptance_rate']:.2f}, "
              f"{stats['tokens_per_target_call']:.2f} tokens/call, updates {a['updates']} "
              f"(rolled back {a['rollbacks']})", file=sys.stderr, flush=True)

    try:
        report["windows"], _ = run_stream(dec, stream, config, args.window, progress)
    finally:
        pair.save_cache()
    if held:
        report["eval_after"] = evaluate(dec, held, config)[0]
    report["adaptation"] = dec.adapter.report()
    if dec.predictor is not None:
        report["predictor"] = dec.predictor.summary()
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"adapter: {path}")
    print("window  prompts  acceptance  tokens/call  tok/s  updates so far (rolled back)")
    for i, w in enumerate(report["windows"], 1):
        print(f"{i:>6}  {w['prompts']:>7}  {w['acceptance_rate']:>10.3f}  {w['tokens_per_target_call']:>11.2f}  "
              f"{w['tokens_per_s']:>5.1f}  {w['updates']}({w['rollbacks']})")
    a = report["adaptation"]
    print(f"{a['updates']} updates ({a['rollbacks']} rolled back) on {a['learner']}, "
          f"{a['seconds_per_step']:.1f} s per step, {sum(a['extra_bytes'].values()) / 1e6:.0f} MB extra memory")
    if dec.predictor is not None:
        p = report["predictor"]
        print(f"acceptance head: {p['updates']} updates on {p['examples']} judged draft tokens, loss {p['loss']:.3f}")
    if held:
        b, a = report["eval_before"], report["eval_after"]
        print(f"held-out ({len(held)} prompts): acceptance {b['acceptance_rate']:.3f} -> {a['acceptance_rate']:.3f}, "
              f"tokens/call {b['tokens_per_target_call']:.2f} -> {a['tokens_per_target_call']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
