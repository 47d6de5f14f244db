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

from . import options as opt
from .cli_build import cmd_draft_head, cmd_export, cmd_make_drafter, cmd_prepare
from .errors import OmniDraftError
from .progress import quiet_libraries
from .runtime.choices import Backend

EXIT_USER_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not usage + error
        raise _UsageError(f"{self.prog}: {message}")


class _UsageError(Exception):
    pass


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="omnidraft", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    gen = sub.add_parser("generate", help="generate text with speculative decoding")
    src = gen.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="the prompt text")
    src.add_argument("--prompt-file", type=Path, help="read the prompt from a UTF-8 file")
    gen.add_argument("--max-new-tokens", type=opt.positive_int, default=64)
    gen.add_argument("--chat", action="store_true", help="apply the target's chat template")
    gen.add_argument("--stop", action="append", default=[], metavar="TEXT", help="stop string (repeatable)")
    gen.add_argument("--no-speculation", action="store_true", help="target-only baseline, same runner")
    gen.add_argument("--json", action="store_true", help="print one JSON object instead of streaming")
    opt.add_model_options(gen)
    opt.add_sampling_options(gen)
    opt.add_proposal_options(gen)
    opt.add_source_option(gen)
    opt.add_adapt_options(gen)
    gen.set_defaults(run=cmd_generate)

    ad = sub.add_parser("adapt", help="adapt the drafter over a stream of prompts and report acceptance per window")
    ad.add_argument("--stream", type=Path, required=True, help="prompts: one per line, or JSONL ({\"prompt\": ...})")
    ad.add_argument("--eval", type=Path, help="held-out prompts (same format) measured before and after")
    ad.add_argument("--window", type=opt.positive_int, default=20, help="prompts per reported window")
    ad.add_argument("--max-new-tokens", type=opt.positive_int, default=32)
    ad.add_argument("--chat", action="store_true", help="apply the target's chat template to every prompt")
    ad.add_argument("--json", action="store_true", help="print one JSON object at the end")
    opt.add_model_options(ad, backends=(Backend.EAGER, Backend.EXECUTORCH))
    opt.add_sampling_options(ad)
    opt.add_proposal_options(ad)
    opt.add_adapt_options(ad, always=True)
    ad.set_defaults(run=cmd_adapt)

    exp = sub.add_parser("export", help="export target and drafter into a bundle (.pte and/or .onnx)")
    exp.add_argument("--target", help="target checkpoint folder (default: Gemma-3-270M)")
    exp.add_argument("--drafter", help="drafter checkpoint folder, small or smollm2-135m-instruct (default: small "
                     "with the default target, SmolLM2-135M-Instruct with any other)")
    exp.add_argument("--out", type=Path, required=True, help="bundle folder to write")
    exp.add_argument("--format", choices=("executorch", "onnx", "both"), default="executorch")
    exp.add_argument("--quant", choices=("none", "8da4w", "8da8w", "int8"), default="none",
                     help="ExecuTorch: 8da4w (int4 weights) or 8da8w (int8 weights), dynamic int8 activations; "
                          "ONNX: int8 (int8 weights)")
    exp.add_argument("--drafter-quant", choices=("none", "8da4w", "8da8w", "int8"),
                     help="the drafter's quantization (default: 8da4w with --quant 8da8w, the fastest pair "
                          "measured; else --quant)")
    exp.add_argument("--embedding-quant", choices=("none", "int8", "int4"),
                     help="ExecuTorch: weight-only quantized embedding tables (groups of 32), both models (default "
                          "int8: the target's program 898 -> 438 MB at the same top-1 agreement)")
    exp.add_argument("--draft-head", action="store_true",
                     help="keep the drafter's draft head (its most frequent tokens only) in its graphs: it pays on "
                          "eager; on ExecuTorch the full head is faster")
    exp.add_argument("--max-context", type=opt.positive_int,
                     help="target KV cache length, up to the model's own limit (default 4096; 512 for bundles with "
                          "ONNX graphs, whose whole cache is copied at every call)")
    exp.add_argument("--drafter-context", type=opt.positive_int,
                     help="drafter KV cache length (default: twice --max-context)")
    exp.add_argument("--max-draft-len", type=opt.positive_int, default=8, help="largest draft length K")
    exp.add_argument("--with-training", action="store_true",
                     help="also export the drafter's LoRA training step and a LoRA-input drafter (ExecuTorch)")
    exp.add_argument("--train-window", type=opt.positive_int,
                     help="draft tokens per training window (default: the adapter's, 64)")
    exp.add_argument("--train-batch", type=opt.positive_int,
                     help="training windows per update step (default: the adapter's, 2)")
    exp.add_argument("--train-kernels", choices=("portable", "xnnpack"), default="portable",
                     help="the update step's kernels: xnnpack is faster, but lowering SmolLM2-135M "
                          "to it needs over 23 GB of memory (fine for small drafters)")
    exp.set_defaults(run=cmd_export)

    sim = sub.add_parser("simulate", help="run a bundle as the phone app does: a chat session (ExecuTorch or onnxruntime)")
    sim.add_argument("--prompt", help="one prompt instead of the interactive chat")
    sim.add_argument("--script", type=Path, help="a scripted chat instead: one message per line of this UTF-8 file")
    sim.add_argument("--system", help="the chat's system prompt (kept when the window moves)")
    sim.add_argument("--chat", action="store_true", help="with --prompt: apply the chat template")
    sim.add_argument("--report", type=Path, metavar="DIR", help="write report.json and PNG plots here")
    sim.add_argument("--max-new-tokens", type=opt.positive_int, default=128)
    opt.add_model_options(sim, backends=(Backend.EXECUTORCH, Backend.ONNXRUNTIME), eager_models=False)
    sim.set_defaults(backend=None)  # the bundle's ExecuTorch programs when it has them (the phone's), else ONNX
    opt.add_sampling_options(sim)
    opt.add_proposal_options(sim)
    opt.add_source_option(sim)
    opt.add_adapt_options(sim)
    sim.set_defaults(run=cmd_simulate)

    md = sub.add_parser("make-drafter", help="distil a small, fast drafter from a larger one")
    md.add_argument("--from", dest="source",
                    help="the model whose tokenizer and layers the drafter keeps (default: SmolLM2-135M-Instruct)")
    md.add_argument("--teacher", choices=("source", "target"), default="source",
                    help="who teaches: the --from model itself, or the target through the vocabulary bridge")
    md.add_argument("--target", help="the target that teaches with --teacher target (default: Gemma-3-270M)")
    md.add_argument("--generated", type=opt.fraction, default=0.25,
                    help="--teacher target: share of windows whose continuations the target writes itself")
    md.add_argument("--top-k", type=opt.positive_int, default=32,
                    help="--teacher target: teacher probabilities kept per position (the rest as one bucket)")
    md.add_argument("--teacher-cache", type=Path,
                    help="--teacher target: folder of the target's cached rows (default: OUT.teacher); "
                         "runs with other --layers or --lr can share it")
    md.add_argument("--out", type=Path, required=True, help="checkpoint folder to write")
    md.add_argument("--layers", type=opt.positive_int, default=4, help="transformer layers to keep")
    md.add_argument("--corpus", default="code,prose,chat", help="comma-separated domains")
    md.add_argument("--tokens", type=opt.positive_int, default=400_000, help="training tokens")
    md.add_argument("--seq-len", type=opt.positive_int, default=128)
    md.add_argument("--batch", type=opt.positive_int, default=8)
    md.add_argument("--lr", type=opt.non_negative_float, default=1e-3)
    md.add_argument("--seed", type=int, default=0)
    md.add_argument("--checkpoint-every", type=opt.positive_int, default=50,
                    help="steps between resumable checkpoints")
    md.add_argument("--restart", action="store_true", help="discard an existing checkpoint instead of resuming")
    md.add_argument("--head-tokens", type=opt.non_negative_int, default=16384,
                    help="draft head: score only the N most frequent tokens (0: the full vocabulary)")
    md.set_defaults(run=cmd_make_drafter)

    dh = sub.add_parser("draft-head", help="restrict a drafter's proposals to its N most frequent tokens (faster steps)")
    dh.add_argument("--drafter", required=True, help="drafter checkpoint folder (or 'smollm2-135m-instruct')")
    dh.add_argument("--tokens", type=opt.non_negative_int, required=True,
                    help="tokens to keep (0: remove the draft head)")
    dh.add_argument("--corpus", default="code,prose,chat", help="comma-separated domains to rank tokens on")
    dh.set_defaults(run=cmd_draft_head)

    prep = sub.add_parser("prepare", help="convert the default models into $OMNIDRAFT_HOME (one time)")
    prep.add_argument("--tokenizers", action="store_true",
                      help="also the GPT-2, Llama-3, Qwen2, Phi-3 and cl100k tokenizers (tests, bridge report; 78 MB download)")
    prep.set_defaults(run=cmd_prepare)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.run(args)
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
        print(f"omnidraft: internal error: {type(e).__name__}: {first} (OMNIDRAFT_DEBUG=1 shows the traceback)",
              file=sys.stderr)
        return 3


def read_prompt(args) -> str:
    if args.prompt is not None:
        return args.prompt
    return opt.read_text(args.prompt_file, "prompt file")


def cmd_generate(args) -> int:
    from .request import check_text

    prompt = read_prompt(args)
    check_text(prompt, "the prompt")  # before any model loads
    if not prompt.strip():
        raise OmniDraftError("the prompt is empty")
    quiet_libraries()
    import torch

    from .api import Model
    from .pair import open_pair

    args.threads = opt.threads(args.threads)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = Model(open_pair(opt.pair_options(args, speculative=not args.no_speculation, adapt=args.adapt)))
    pair = model.pair
    request = {"prompt": None, "messages": [{"role": "user", "content": prompt}]} if args.chat else {"prompt": prompt}
    request.update(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p, seed=args.seed,
                   stop=args.stop, strict_sampling=args.strict_sampling, sampled_drafts=args.sampled_drafts)
    with model:  # what the pair learned is saved, even when the generation fails
        if args.json:
            result = model.generate(**request)
        else:
            write = opt.source_writer(args.show_sources, sys.stdout)
            pieces = model.stream(**request, sources=True)
            try:
                for piece, source in pieces:
                    write(piece, source)
            finally:  # interrupted while writing: the generation ends here, before its state is saved
                pieces.close()
            result = model.last
    s = result.stats
    report = {
        "text": result.text, **s.to_json(), "target": pair.target_name, "drafter": pair.drafter_name,
        "backend": pair.decoder.target.backend, "speculative": not args.no_speculation,
        "stop_reason": result.stop_reason,
        "draft_len": pair.draft.describe() if pair.draft else None,
        "temperature": args.temperature, "threads": torch.get_num_threads(),
        "proposer": None if args.no_speculation else args.proposer,
    }
    if args.show_sources:
        report["sources"] = result.sources  # who proposed each token
    for internal in ("rounds", "draft_policy"):  # the loop's own trace and the resolved policy stay out of the report
        report.pop(internal, None)
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        sys.stdout.write("\n")
        mode = "speculative" if report["speculative"] else "target-only"
        print(
            f"[{mode}] {s.new_tokens} tokens in {s.decode_s:.2f}s ({s.tokens_per_s:.2f} tok/s), "
            f"{s.tokens_per_target_call:.2f} tokens/target call, acceptance {s.acceptance_rate:.2f} "
            f"(accepted/proposed: {opt.proposal_summary(s)}), n-gram hits {s.drafter.ngram_hits}, "
            f"stop: {result.stop_reason}, threads {report['threads']}" + "".join(f", {t}" for t in opt.timing_parts(s))
            + (f", drafter {pair.drafter_name}" if pair.drafter_name else ""),
            file=sys.stderr,
        )
    return 0


def read_prompt_stream(path: Path) -> list[str]:
    """Prompts from a file: JSONL lines ({"prompt": ...} or a JSON string) or one plain prompt per line."""
    text = opt.read_text(path, "prompt stream")
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


def cmd_adapt(args) -> int:
    stream_texts = read_prompt_stream(args.stream)
    eval_texts = read_prompt_stream(args.eval) if args.eval else []
    quiet_libraries()
    import torch

    from .adaptation.stream import evaluate, run_stream
    from .pair import open_pair

    args.threads = opt.threads(args.threads)
    if args.threads:
        torch.set_num_threads(args.threads)
    pair = open_pair(opt.pair_options(args, adapt=True))
    path = pair.adapter_path
    encode = lambda texts: [pair.encode_prompt(t, chat=args.chat) for t in texts]  # noqa: E731
    stream, held = encode(stream_texts), encode(eval_texts)
    config = opt.generation_config(args, pair, args.chat)
    dec = pair.decoder
    report = {"profile": args.profile, "adapter": str(path), "prompts": len(stream), "window": args.window,
              "threads": torch.get_num_threads(), "temperature": args.temperature,
              "strict_sampling": args.strict_sampling, "proposer": args.proposer}
    if held:
        report["eval_before"] = evaluate(dec, held, config)[0]

    def progress(i, stats):
        a = stats.adaptation or {"updates": 0, "rollbacks": 0}
        print(f"[{i + 1}/{len(stream)}] acceptance {stats.acceptance_rate:.2f}, "
              f"{stats.tokens_per_target_call:.2f} tokens/call, updates {a['updates']} "
              f"(rolled back {a['rollbacks']})", file=sys.stderr, flush=True)

    try:
        report["windows"], _ = run_stream(dec, stream, config, args.window, progress)
    finally:
        pair.save_cache()
    if held:
        report["eval_after"] = evaluate(dec, held, config)[0]
    report["adaptation"] = pair.adapter.report()
    if pair.predictor is not None:
        report["predictor"] = pair.predictor.summary()
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
    if pair.predictor is not None:
        p = report["predictor"]
        print(f"acceptance head: {p['updates']} updates on {p['examples']} judged draft tokens, loss {p['loss']:.3f}")
    if held:
        b, a = report["eval_before"], report["eval_after"]
        print(f"held-out ({len(held)} prompts): acceptance {b['acceptance_rate']:.3f} -> {a['acceptance_rate']:.3f}, "
              f"tokens/call {b['tokens_per_target_call']:.2f} -> {a['tokens_per_target_call']:.2f}")
    return 0


def cmd_simulate(args) -> int:
    quiet_libraries()
    from .simulator import run

    return run(args)


if __name__ == "__main__":
    sys.exit(main())
