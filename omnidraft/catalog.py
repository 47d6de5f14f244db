"""Which model a name means: the default models, the shipped small drafter, a GGUF file or a checkpoint folder.

The one place a --target/--drafter value becomes a folder (preparing a default model or assembling
the small drafter on first use). It sits above the model loaders and the small drafter's assembly,
so loading a model never imports how a drafter is made.
"""

from __future__ import annotations

from pathlib import Path

from .errors import OmniDraftError
from .models import DEFAULT_DRAFTER, DEFAULT_MODELS, DEFAULT_TARGET, DefaultModel, check_architecture, \
    prepare_default_model, prepare_gguf
from .progress import log


def resolve_model_path(spec: str | None, default: DefaultModel) -> Path:
    """Map a --target/--drafter value to a checkpoint folder, preparing defaults on demand."""
    if spec is None or spec in DEFAULT_MODELS:
        return prepare_default_model(DEFAULT_MODELS[spec] if spec else default)
    if spec == "small":  # the shipped small drafter (small_drafter.py), assembled on first use
        from .small_drafter import assemble

        return assemble()
    path = Path(spec).expanduser()
    if not path.exists():
        raise OmniDraftError(f"model path does not exist: {path}")
    if path.is_file() and path.suffix.lower() == ".gguf":  # llama.cpp's format: converted once
        path = prepare_gguf(path)
    if not (path / "config.json").is_file():
        raise OmniDraftError(f"not a Hugging Face checkpoint folder (no config.json) or a .gguf file: {path}")
    check_architecture(path)
    return path


def resolve_pair_paths(target: str | None, drafter: str | None) -> tuple[Path, Path]:
    """The (target, drafter) folders of a pair. With no drafter named, the default target gets the shipped
    small drafter (the target taught it: fastest on ExecuTorch, benchmarks/RESULTS.md "Which drafter by
    default") and any other target SmolLM2-135M-Instruct, which was not taught by it. A damaged or missing
    small drafter is then a warning and SmolLM2 drafts; asked for by name, it is an error."""
    named = {}  # a bad folder is reported before any default model is prepared (each path resolved once)
    for spec in (target, drafter):
        if spec is not None and spec not in DEFAULT_MODELS and spec != "small":
            named[spec] = resolve_model_path(spec, DEFAULT_TARGET)
    target_path = named.get(target) or resolve_model_path(target, DEFAULT_TARGET)
    if drafter is not None or target not in (None, DEFAULT_TARGET.name):
        return target_path, named.get(drafter) or resolve_model_path(drafter, DEFAULT_DRAFTER)
    try:
        return target_path, resolve_model_path("small", DEFAULT_DRAFTER)
    except OmniDraftError as e:
        log(f"[omnidraft] warning: the shipped small drafter is not usable ({e}); drafting with {DEFAULT_DRAFTER.name}")
        return target_path, resolve_model_path(None, DEFAULT_DRAFTER)
