"""`omnidraft export`: target + drafter -> a self-contained bundle folder.

The bundle is built in a temporary folder next to --out and renamed into place
at the end: an interrupted export leaves the previous bundle (or nothing), never
half a bundle. Format: omnidraft/bundle.py.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path

from ..adaptation.loss import LAMBDA
from ..version import __version__
from ..atomic import atomic_directory
from ..bundle import Manifest, ModelEntry, file_entry
from ..draft_head import apply_draft_head
from ..errors import OmniDraftError
from ..catalog import resolve_pair_paths
from ..models import check_context, load_model, load_tokenizer
from ..state import omnidraft_home
from ..chat import eos_ids
from ..progress import log, stage
from ..runtime.bridge import VocabBridge
from ..runtime.vocab import Vocab
from .policy import policy

QUANTS = {"onnx": ("none", "int8"), "executorch": ("none", "8da4w", "8da8w")}
DEFAULT_WINDOW = 4096  # the default --max-context: sliding-window layers keep a ring, so it costs them nothing
ONNX_WINDOW = 512  # ... except in ONNX graphs, whose caches are graph inputs and outputs copied at every call


def _versions() -> dict:
    out = {"omnidraft": __version__}
    for pkg in ("torch", "transformers", "executorch", "torchao", "onnx", "onnxruntime"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


@dataclass
class ExportOptions:
    """How to export a pair (the `export` command's options), checked once by `validate()`.

    draft_head: keep the drafter folder's draft head (omnidraft/draft_head.py) in its graphs. Off by
    default: on ExecuTorch the full head is faster (the shipped small drafter: c 0.24 -> 0.22 at 8da8w,
    0.25 -> 0.16 at 8da4w; benchmarks/RESULTS.md "Which drafter by default"), the draft head pays on eager.
    The training program's window and batch default to the online adapter's (AdaptConfig)."""

    target: str | None = None
    drafter: str | None = None
    formats: tuple[str, ...] = ("onnx",)
    quant: str = "none"
    drafter_quant: str | None = None  # None: 8da4w with an 8da8w target (the fastest pair measured), else `quant`
    embedding_quant: str | None = None  # None: int8 for ExecuTorch programs (half the target's size, same agreement)
    draft_head: bool = False
    max_context: int | None = None  # None: 4096, or 512 when the bundle has ONNX graphs (ONNX_WINDOW below)
    max_draft_len: int = 8
    drafter_context: int | None = None  # None: twice max_context
    chunk: int = 16
    prefill_chunk: int = 128  # the target's graphs take this many tokens a call (logits of at most `chunk` rows)
    with_training: bool = False
    train_window: int | None = None
    train_batch: int | None = None
    train_kernels: str = "portable"
    lora: object = None  # LoRAConfig of the training program (None: the default)
    lam: float = LAMBDA

    @property
    def quants(self) -> dict[str, str]:
        """Each model's quantization. An 8da8w target gets an 8da4w drafter unless told otherwise: a drafter's
        rounding cannot change the output, and int4 weights make it the cheapest (benchmarks/RESULTS.md,
        "Which drafter by default": the small drafter's cost ratio c 0.22 at 8da8w, 0.16 at 8da4w)."""
        drafter = self.drafter_quant
        if drafter is None:
            drafter = "8da4w" if self.quant == "8da8w" else self.quant
        return {"target": self.quant, "drafter": drafter}

    @property
    def logit_rows(self) -> int:
        """Rows of logits a call returns at most: verification needs K + 1."""
        return max(self.max_draft_len + 1, self.chunk)

    def tokens_per_call(self, role: str) -> int:
        """One graph per model: the target's reads a prefill chunk per call (the logits of `logit_rows` rows at
        most: the rows a call asks for), the drafter's verification-sized chunks (prefill and resync)."""
        if role == "target":
            return min(max(self.prefill_chunk, self.logit_rows), self.max_context)
        return self.logit_rows

    def contexts(self) -> dict[str, int]:
        return {"target": self.max_context, "drafter": self.drafter_context or 2 * self.max_context}

    def validate(self) -> "ExportOptions":
        """The options with the defaults filled in; one clear error for any that cannot work."""
        if self.max_context is None:
            window = ONNX_WINDOW if "onnx" in self.formats else DEFAULT_WINDOW
            return replace(self, max_context=window).validate()
        for fmt in self.formats:
            for q in set(self.quants.values()):
                if q not in QUANTS[fmt]:
                    raise OmniDraftError(f"quantization {q!r} is not available for {fmt} (choose {', '.join(QUANTS[fmt])})")
        if self.embedding_quant not in (None, "none") and "executorch" not in self.formats:
            raise OmniDraftError("--embedding-quant applies to ExecuTorch programs: use --format executorch or both")
        if self.embedding_quant is None:  # int8 tables: 898 -> 438 MB target, top-1 agreement unchanged (RESULTS.md)
            return replace(self, embedding_quant="int8" if "executorch" in self.formats else "none").validate()
        if self.max_draft_len < 1:
            raise OmniDraftError("max draft length must be at least 1")
        if self.prefill_chunk < 1:
            raise OmniDraftError("the prefill chunk must be at least 1 token")
        if self.max_context < self.max_draft_len + 2:
            raise OmniDraftError("max context must exceed the max draft length + 1")
        if self.with_training and "executorch" not in self.formats:
            raise OmniDraftError("--with-training builds ExecuTorch programs: use --format executorch or both")
        if not self.with_training:
            return self
        from ..adaptation.online import AdaptConfig

        return replace(self, train_window=self.train_window or AdaptConfig.window,
                       train_batch=self.train_batch or AdaptConfig.batch)


def export_bundle(out: Path, target: str | None = None, drafter: str | None = None, **options) -> Path:
    """Export both models in each format into the bundle folder `out` (options: ExportOptions' fields)."""
    o = ExportOptions(target=target, drafter=drafter, **options).validate()
    if options.get("max_context") is None and "onnx" in o.formats:  # said once the options are known to be good
        log(f"[omnidraft] a {o.max_context}-position window: ONNX graphs pass their whole KV cache in and out at every "
            f"call, so a 4096 window makes a step 3.2x a 512 one (Gemma-3-270M fp32, 2 threads: 174 against 54 ms); "
            f"pass --max-context to choose")
    out = Path(out)
    paths = dict(zip(("target", "drafter"), resolve_pair_paths(o.target, o.drafter)))
    for role, path in paths.items():
        check_context(path, o.contexts()[role], "--max-context" if role == "target" else "the drafter's context")
    start = time.perf_counter()
    with atomic_directory(out) as tmp:
        vocabs, models, training = {}, {}, None
        for role, path in paths.items():
            tok = load_tokenizer(path)
            vocabs[role] = Vocab.from_tokenizer(tok)
            tok.save_pretrained(tmp / "tokenizers" / role)
            models[role] = _export_model(role, path, tmp, vocabs[role], o)
            if role == "drafter" and o.with_training:
                training = _export_training(load_model(path), path, tmp, vocabs, models[role].graphs,
                                            o.contexts()[role], o)
        bridge = VocabBridge(vocabs["drafter"], vocabs["target"])
        cache_name = None
        cache_src = omnidraft_home() / "ngram" / f"{paths['drafter'].name}--{paths['target'].name}--{bridge.pair_id}.json"
        if cache_src.exists():
            shutil.copyfile(cache_src, tmp / "ngram_cache.json")
            cache_name = "ngram_cache.json"
        tv = vocabs["target"].tokenizer
        with stage("hashing bundle files"):
            files = {str(p.relative_to(tmp)): file_entry(tmp, str(p.relative_to(tmp)))
                     for p in sorted(tmp.rglob("*")) if p.is_file()}
        Manifest(
            max_context=o.max_context, max_draft_len=o.max_draft_len, quant=o.quant,
            embedding_quant=o.embedding_quant, pair_id=bridge.pair_id, versions=_versions(), models=models,
            eos_ids=sorted(eos_ids(tv)), chat_eos_ids=sorted(eos_ids(tv, chat=True)), ngram_cache=cache_name,
            training=training, files=files, created=time.strftime("%Y-%m-%dT%H:%M:%S"), policy=policy(),
        ).write(tmp / "bundle.json")
    log(f"[omnidraft] bundle written to {out} in {time.perf_counter() - start:.0f}s")
    return out


def _export_model(role: str, path: Path, tmp: Path, vocab: Vocab, o: ExportOptions) -> ModelEntry:
    """One model's graphs in every format, and its bundle.json entry."""
    with stage(f"{role}: loading {path.name}"):
        model = load_model(path)
        draft_tokens = apply_draft_head(model, path) if role == "drafter" and o.draft_head else None
    context, quant = o.contexts()[role], o.quants[role]
    rows = o.logit_rows if role == "target" else None
    graphs, meta = {}, None
    for fmt in sorted(o.formats, key=lambda f: f != "onnx"):  # ExecuTorch last: its export changes the model
        if fmt == "onnx":
            from .onnx_export import export_onnx

            meta = export_onnx(model, tmp / f"{role}.onnx", context, o.tokens_per_call(role), quant,
                               head=role == "drafter", max_logit_rows=rows)
            graphs["onnx"] = f"{role}.onnx"
        else:
            from .executorch_export import export_executorch

            meta = export_executorch(model, tmp / f"{role}.pte", context, o.tokens_per_call(role), quant,
                                     head=role == "drafter", exact_rows=role == "target",
                                     embedding_quant=o.embedding_quant, max_logit_rows=rows)
            graphs["executorch"] = f"{role}.pte"
    return ModelEntry(
        name=path.name, vocab_size=meta["vocab_size"], max_context=context, max_tokens_per_call=o.tokens_per_call(role),
        max_logit_rows=rows, cache_lengths=meta.get("cache_lengths"), sliding_window=meta.get("sliding_window"),
        kv_shape=meta["kv_shape"], tokenizer=f"tokenizers/{role}", tokenizer_fingerprint=vocab.fingerprint,
        graphs=graphs, quant=quant,
        executorch_ops=meta.get("executorch_ops", []),  # meta: the ExecuTorch export's, when there is one
        acceptance_head=meta.get("acceptance_head"), draft_head={"tokens": draft_tokens} if draft_tokens else None,
    )


def _export_training(model, path: Path, tmp: Path, vocabs, graphs: dict, context: int, o: ExportOptions) -> dict:
    """drafter_train.pte + drafter_lora.pte (fp32: training needs full-precision weights)."""
    from ..adaptation.examples import Mapping
    from ..adaptation.lora import LoRAConfig
    from .training_export import export_lora_drafter, export_training, lora_model

    lora = o.lora or LoRAConfig()
    mapping = Mapping.from_bridge(VocabBridge(vocabs["drafter"], vocabs["target"]))
    model = lora_model(model, lora)
    train = export_training(model, tmp / "drafter_train.pte", o.train_window, o.train_batch, mapping.draft_ids, o.lam,
                            o.train_kernels)
    if o.draft_head:  # after: training keeps the full head; drafter_lora.pte drafts like drafter.pte
        apply_draft_head(model, path)
    meta = export_lora_drafter(model, tmp / "drafter_lora.pte", context, o.tokens_per_call("drafter"))
    graphs["executorch_train"] = "drafter_train.pte"
    graphs["executorch_lora"] = "drafter_lora.pte"
    return {**train, "lora": lora.to_dict(), "lora_inputs": meta["lora_inputs"]}
