"""The commands that make things: `prepare` (the default models), `export` (bundles), `make-drafter` and
`draft-head` (drafters). The command line's parser (cli.py) dispatches to them."""

from __future__ import annotations

from .errors import OmniDraftError
from .progress import quiet_libraries


def cmd_prepare(args) -> int:
    quiet_libraries(progress_bars=True)  # GGUF conversion shows its own progress
    from .models import DEFAULT_DRAFTER, DEFAULT_TARGET, prepare_default_model

    for model in (DEFAULT_TARGET, DEFAULT_DRAFTER):
        path = prepare_default_model(model)
        print(f"{model.role}: {model.name} ready at {path}")
    from .small_drafter import SHIPPED, assemble

    if SHIPPED.exists():
        print(f"drafter: small ready at {assemble()}")
    if args.tokenizers:
        from .tokenizer_families import prepare_families

        for family, path in prepare_families().items():
            print(f"tokenizer: {family} ready at {path}")
    return 0


def cmd_export(args) -> int:
    quiet_libraries()
    from .export.build import export_bundle

    formats = ("executorch", "onnx") if args.format == "both" else (args.format,)
    export_bundle(
        args.out, args.target, args.drafter, formats=formats, quant=args.quant, drafter_quant=args.drafter_quant,
        embedding_quant=args.embedding_quant, draft_head=args.draft_head, max_context=args.max_context,
        drafter_context=args.drafter_context, max_draft_len=args.max_draft_len,
        with_training=args.with_training, train_window=args.train_window, train_batch=args.train_batch,
        train_kernels=args.train_kernels,
    )
    print(args.out)
    return 0


def cmd_make_drafter(args) -> int:
    quiet_libraries()
    from .distill import DistillConfig, distill
    from .models import DEFAULT_DRAFTER, DEFAULT_TARGET
    from .catalog import resolve_model_path

    domains = _domains(args.corpus)
    config = DistillConfig(layers=args.layers, tokens=args.tokens, seq_len=args.seq_len, batch=args.batch, lr=args.lr,
                           seed=args.seed, checkpoint_every=args.checkpoint_every, domains=domains)
    target, teacher_config = None, None
    if args.teacher == "target":
        from .teacher import TeacherConfig

        target = resolve_model_path(args.target, DEFAULT_TARGET)
        teacher_config = TeacherConfig.for_window(args.seq_len, batch=args.batch, generated=args.generated,
                                                  top_k=args.top_k, seed=args.seed)
    elif args.target is not None or args.teacher_cache is not None:
        raise OmniDraftError("--target and --teacher-cache are for --teacher target")
    distill(resolve_model_path(args.source, DEFAULT_DRAFTER), args.out, config, restart=args.restart,
            head_tokens=args.head_tokens, target_path=target, teacher_config=teacher_config,
            teacher_cache=args.teacher_cache)
    return 0


def cmd_draft_head(args) -> int:
    quiet_libraries()
    from .draft_head import write_head
    from .models import DEFAULT_DRAFTER, load_tokenizer
    from .catalog import resolve_model_path

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
