"""The bundle: the contract between export, the Python runtime, the simulator and the app.

A bundle is one folder:

    bundle.json                 this manifest (format below)
    target.onnx / target.pte    the target's graph(s): tokens + positions -> logits, KV cache
    drafter.onnx / drafter.pte  the drafter's graph(s), same signature
    tokenizers/target/          the target's tokenizer files (tokenizer.json, config)
    tokenizers/drafter/         the drafter's tokenizer files
    ngram_cache.json            optional: the pair's n-gram cache at export time
    drafter_train.pte           optional (--with-training): the LoRA training step
    drafter_lora.pte            optional (--with-training): the drafter taking LoRA tensors as inputs

bundle.json, version 5 (versions 1 to 4 still load for decoding: they lack version 5's
logit rows and rings, version 3 also the version-4 training program, version 2 also custom
operators, version 1 also acceptance heads):

    format            "omnidraft-bundle"
    version           5
    created           ISO date
    max_context       target KV cache length (the drafter's is in its own entry); must equal
                      models.target.max_context
    max_draft_len     K: verification graphs take 1..K+1 tokens
    quant             "none" | "8da4w" | "8da8w" (ExecuTorch) | "int8" (ONNX)
    pair_id           drafter and target vocabulary fingerprints
    versions          {omnidraft, torch, transformers, executorch, onnx, onnxruntime}
    models.target / models.drafter:
        name, vocab_size, max_context, max_tokens_per_call, kv_shape
        [layers, 1, kv_heads, max_context, head_dim], tokenizer (folder),
        tokenizer_fingerprint, graphs {"onnx": file, "executorch": file}
    models.target.max_logit_rows   (version 5) the target's graphs take a third input,
                      logit_rows [k] (int64, 1 <= k <= max_logit_rows): the rows of the call
                      whose logits they return, so a prefill chunk of max_tokens_per_call
                      (128 by default) pays the 262k-wide output layer once
    models.target.cache_lengths, sliding_window   (version 5) the ExecuTorch program's cache
                      length per layer: sliding-window layers keep a ring of sliding_window +
                      max_tokens_per_call slots, the others the whole context (llama_ops.py); a
                      rollback deeper than the ring's slack (its length less the window) below
                      the highest position written must re-read the text (runner.py)
    models.<role>.executorch_ops   (version 3) custom operator libraries the role's ExecuTorch
                      programs need at run time: ["llama"] = ExecuTorch's LLM ops
                      (llama::update_cache, llama::custom_sdpa), "quantized" = ExecuTorch's
                      quantized kernels (embedding lookups of --embedding-quant); both in the
                      executorch wheel and the Android AAR; [] or absent = none
    models.<role>.quant   (version 3) that model's quantization (--drafter-quant may differ)
    embedding_quant   (version 3) "none" | "int8" | "int4": ExecuTorch embedding tables
    models.drafter.acceptance_head   (version 2) {features F, inputs [head_weight,
                      head_bias], outputs [head_features, accept_prob]}: the drafter's
                      graphs also compute the acceptance head (--draft-len auto)
    models.drafter.draft_head   optional {tokens N}: the drafter graphs score only its N
                      most frequent tokens (omnidraft/draft_head.py); their logits keep the
                      full [vocab] shape with -inf elsewhere, so nothing reading them changes
    eos_ids, chat_eos_ids   target token ids that end generation
    ngram_cache       file name or null
    training          null, or (--with-training) {window W, batch B, lam, mapped, update
                      {optimizer "adam", betas, eps, clip}, kernels "portable" | "xnnpack" (version 4), lora {rank, alpha,
                      targets}, lora_inputs [[name, shape], ...]}; the drafter's graphs
                      then also hold "executorch_train" and "executorch_lora"
    policy            optional (bundles exported since 2026-12-07): the runtime's decision
                      constants and the adaptation schedule, so the app reads them rather than
                      copying them (omnidraft/export/policy.py writes it); POLICY_FIELDS below
                      lists every field and its kind; the Python runtime reads the same values
                      from its own modules (they are the section's source)
    files             {relative path: {size, sha256}} for every file above

Graph signature (ONNX): inputs input_ids [1, n] int64, position_ids [1, n] int64,
past_keys and past_values (kv_shape, float32)[, logit_rows [k] for a version-5 target];
outputs logits [1, n or k, vocab], present_keys, present_values (kv_shape). ExecuTorch: inputs
input_ids [1, n] and position_ids [1, n][, logit_rows [k] for a version-5 target]; the KV cache is a mutable buffer inside the program (with
executorch_ops ["llama"], written in place by llama::update_cache; a target's graph
computes each row of a k-token call exactly as a one-token call would, bit for bit,
a drafter's reads it with llama::custom_sdpa; omnidraft/export/llama_ops.py);
output logits [1, n, vocab]. In both, 1 <= n <= max_tokens_per_call, and positions past
the last written one are masked, so a rollback is just writing there again.
A drafter graph with an acceptance head takes two more inputs after the positions
(ONNX: after past_values): head_weight [F] and head_bias [1] (float32, the head's
current weights), and returns two more outputs after the others: head_features
[1, F] (the last position's RMS-normalized hidden state, top-1 probability and
entropy / log V) and accept_prob [1] = sigmoid(head_features . head_weight + head_bias),
see omnidraft/runtime/acceptance.py.

Training (ExecuTorch, version 4, see omnidraft/export/training_export.py): drafter_train.pte
is an ordinary program (no training runtime). Its method "forward" is one whole update
step: it takes (*lora, *exp_avg, *exp_avg_sq, step [], lr [], ids [B, W], kl_rows [B*W],
kl_target [B*W, mapped] float32, kl_weight [B*W], nll_rows [B*W], nll_labels [B*W],
nll_weight [B*W]) -- the LoRA tensors and their Adam moments in lora_inputs order, the
1-based step number and the learning rate as float32 scalars, then B windows of W draft
tokens with flat rows into B*W (missing examples and rows padded, weight 0) -- and returns
(loss, L_DM, L_ngram, *lora', *exp_avg', *exp_avg_sq'): the pooled hybrid loss's gradients
clipped to `clip`, then Adam (omnidraft/adaptation/update_rule.py). Its method "lora_init"
takes nothing and returns the fresh LoRA tensors. (Version 3's drafter_train.pte ran the
backward through ExecuTorch's training API with SGD; such a bundle must be re-exported to
adapt.) drafter_lora.pte takes
(input_ids, position_ids, [head_weight, head_bias,] *lora_inputs in the listed order)
and returns logits [, head_features, accept_prob] (the head parts in version 2).

Loading checks everything: format and version, every field's type and range (paths
relative and inside the bundle), every file's presence, size and hash, tokenizer
identity and vocabulary sizes, the requested draft length against max_draft_len, and,
when a runner opens a graph, the manifest's numbers against the graph itself (its inputs'
and output's largest shapes, its KV cache, and for ExecuTorch a one-token call at the
last position of the context it claims). Any failure is one clear OmniDraftError.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import OmniDraftError

FORMAT = "omnidraft-bundle"
VERSION = 5
READABLE_VERSIONS = (1, 2, 3, 4, 5)
EXECUTORCH_OPS = ("llama", "quantized")
QUANTS = ("none", "8da4w", "8da8w", "int8")
EMBEDDING_QUANTS = ("none", "int8", "int4")
ROLES = ("target", "drafter")
BACKEND_FORMATS = {"onnxruntime": "onnx", "executorch": "executorch"}
# the policy section: "share" a number in (0, 1], "positive" a number > 0, "count" an integer >= 1,
# an integer n: a list of n finite numbers (android_demo's Policy.java checks the same)
POLICY_FIELDS = {
    "hybrid": {"explore_share": "share", "carry": "positive", "min_call_s": "positive", "max_call_s": "positive",
               "prior_c": "positive", "prior_slope": "positive", "ridge": "positive", "cost_decay": "share",
               "step_ema": "share", "rounds_decay": "share", "rounds_prior": 5},
    "drafting": {"catchup_window": "count", "max_lookup": "count"},
    "lookup": {"max_match": "count", "max_candidates": "count", "max_occurrences": "count", "scorer_prior": 6,
               "scorer_lr": "positive", "scorer_fast_lr": "positive", "scorer_max_offset": "positive"},
    "adaptation": {"lr": "positive", "every": "count", "steps": "count", "buffer": "count", "holdout_every": "count",
                   "holdout": "count", "replay": "count", "warmup": "count", "guard_margin": "positive"},
}


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def file_entry(root: Path, rel: str) -> dict:
    path = root / rel
    return {"size": path.stat().st_size, "sha256": sha256_file(path)}


@dataclass(frozen=True)
class ModelEntry:
    """models.<role> of bundle.json: one model's graphs and what a runner needs to know about them."""

    name: str
    vocab_size: int
    max_context: int
    max_tokens_per_call: int
    kv_shape: list[int]
    tokenizer: str
    tokenizer_fingerprint: str
    graphs: dict[str, str]
    quant: str = "none"
    executorch_ops: list[str] = field(default_factory=list)
    acceptance_head: dict | None = None
    draft_head: dict | None = None
    max_logit_rows: int | None = None
    cache_lengths: list[int] | None = None
    sliding_window: int | None = None

    @classmethod
    def parse(cls, m, role: str) -> ModelEntry:
        _need(isinstance(m, dict), f"models.{role}")
        _need(isinstance(m["name"], str) and m["name"], f"models.{role}.name")
        for key in ("vocab_size", "max_context", "max_tokens_per_call"):
            _positive(m[key], f"models.{role}.{key}")
        kv = m["kv_shape"]
        _need(isinstance(kv, list) and len(kv) == 5 and all(isinstance(x, int) and x >= 1 for x in kv),
              f"models.{role}.kv_shape")
        _relative(m["tokenizer"], f"models.{role}.tokenizer")
        _need(isinstance(m.get("tokenizer_fingerprint"), str), f"models.{role}.tokenizer_fingerprint")
        graphs = m["graphs"]
        _need(isinstance(graphs, dict) and graphs, f"models.{role}.graphs")
        for key, rel in graphs.items():
            _relative(rel, f"models.{role}.graphs.{key}")
        _need(m.get("quant", "none") in QUANTS, f"models.{role}.quant")
        ops = m.get("executorch_ops", [])
        _need(isinstance(ops, list) and all(op in EXECUTORCH_OPS for op in ops), f"models.{role}.executorch_ops")
        head = m.get("acceptance_head")
        _need(head is None or (isinstance(head, dict) and isinstance(head.get("features"), int)
                               and head["features"] >= 3), f"models.{role}.acceptance_head.features")
        draft_head = m.get("draft_head")
        _need(draft_head is None or (isinstance(draft_head, dict) and isinstance(draft_head.get("tokens"), int)
                                     and 1 <= draft_head["tokens"] <= m["vocab_size"]), f"models.{role}.draft_head.tokens")
        rows = m.get("max_logit_rows")
        _need(rows is None or (_positive(rows, f"models.{role}.max_logit_rows") <= m["max_tokens_per_call"]),
              f"models.{role}.max_logit_rows")
        lengths = m.get("cache_lengths")
        _need(lengths is None or (isinstance(lengths, list) and len(lengths) == kv[0] and all(
            isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= m["max_context"] for x in lengths)),
            f"models.{role}.cache_lengths")
        window = m.get("sliding_window")
        _need((window is None) == (lengths is None) and (window is None or (
            _positive(window, f"models.{role}.sliding_window") < min(lengths))), f"models.{role}.sliding_window")
        _need(kv[3] == m["max_context"], f"models.{role}.kv_shape (its length is not max_context)")
        return cls(m["name"], m["vocab_size"], m["max_context"], m["max_tokens_per_call"], kv, m["tokenizer"],
                   m["tokenizer_fingerprint"], graphs, m.get("quant", "none"), ops, head, draft_head, rows, lengths,
                   window)

    def to_dict(self) -> dict:
        """The JSON object (optional parts only when present); also what runners read (`meta`)."""
        out = asdict(self)
        return {k: v for k, v in out.items() if v is not None}


@dataclass(frozen=True)
class Manifest:
    """bundle.json, typed: written by export (Manifest(...).write), read and validated by load_bundle."""

    max_context: int
    max_draft_len: int
    quant: str
    pair_id: str
    models: dict[str, ModelEntry]
    files: dict[str, dict]
    versions: dict = field(default_factory=dict)
    embedding_quant: str = "none"
    eos_ids: list[int] = field(default_factory=list)
    chat_eos_ids: list[int] = field(default_factory=list)
    ngram_cache: str | None = None
    training: dict | None = None
    created: str = ""
    version: int = VERSION
    policy: dict | None = None

    @classmethod
    def parse(cls, manifest: dict) -> Manifest:
        """Every field the runtime reads, with its type and range (ValueError/KeyError/TypeError naming it)."""
        models = manifest["models"]
        _need(isinstance(models, dict), "models")
        entries = {role: ModelEntry.parse(models[role], role) for role in ROLES}
        files = manifest["files"]
        _need(isinstance(files, dict) and files, "files")
        for rel, entry in files.items():
            _relative(rel, "files")
            _need(isinstance(entry, dict), f"files.{rel}")
            _need(isinstance(entry.get("size"), int) and entry["size"] >= 0, f"files.{rel}.size")
            _need(isinstance(entry.get("sha256"), str) and len(entry["sha256"]) == 64, f"files.{rel}.sha256")
        for role in ROLES:
            for rel in entries[role].graphs.values():
                _need(rel in files, f"files (graph {rel} is not listed)")
        _positive(manifest["max_draft_len"], "max_draft_len")
        _need(manifest.get("quant", "none") in QUANTS, "quant")
        _need(manifest.get("embedding_quant", "none") in EMBEDDING_QUANTS, "embedding_quant")
        training = manifest.get("training")
        if training:
            _need(isinstance(training, dict), "training")
            _positive(training["window"], "training.window")
            _positive(training["mapped"], "training.mapped")
            if manifest["version"] >= 4:
                _positive(training["batch"], "training.batch")
                update = training["update"]
                _need(isinstance(update, dict) and update.get("optimizer") == "adam", "training.update")
            lora = training["lora_inputs"]
            _need(isinstance(lora, list) and all(
                isinstance(x, list) and len(x) == 2 and isinstance(x[0], str) and isinstance(x[1], list)
                and all(isinstance(d, int) and d >= 1 for d in x[1]) for x in lora), "training.lora_inputs")
            for key in ("executorch_train", "executorch_lora"):
                _need(key in entries["drafter"].graphs, f"models.drafter.graphs.{key}")
        for key in ("eos_ids", "chat_eos_ids"):
            ids = manifest.get(key, [])
            _need(isinstance(ids, list) and all(isinstance(i, int) and 0 <= i < entries["target"].vocab_size
                                                for i in ids), key)
        cache = manifest.get("ngram_cache")
        _need(cache is None or (_relative(cache, "ngram_cache") in files), "ngram_cache")
        policy = manifest.get("policy")
        if policy is not None:
            check_policy(policy)
        top = manifest.get("max_context", entries["target"].max_context)
        _need(top == entries["target"].max_context, "max_context (not the target's)")
        return cls(top, manifest["max_draft_len"],
                   manifest.get("quant", "none"), str(manifest.get("pair_id", "")), entries, files,
                   manifest.get("versions", {}), manifest.get("embedding_quant", "none"), manifest.get("eos_ids", []),
                   manifest.get("chat_eos_ids", []), cache, training or None, str(manifest.get("created", "")),
                   manifest["version"], policy)

    def to_dict(self) -> dict:
        return {"format": FORMAT, "version": self.version, "created": self.created, "max_context": self.max_context,
                "max_draft_len": self.max_draft_len, "quant": self.quant, "embedding_quant": self.embedding_quant,
                "pair_id": self.pair_id, "versions": self.versions,
                "models": {role: entry.to_dict() for role, entry in self.models.items()},
                "eos_ids": self.eos_ids, "chat_eos_ids": self.chat_eos_ids, "ngram_cache": self.ngram_cache,
                "training": self.training, "policy": self.policy, "files": self.files}

    def write(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1))


@dataclass(frozen=True)
class Bundle:
    root: Path
    manifest: Manifest

    @property
    def max_draft_len(self) -> int:
        return self.manifest.max_draft_len

    def model(self, role: str) -> ModelEntry:
        return self.manifest.models[role]

    def graph_path(self, role: str, backend: str) -> Path:
        fmt = BACKEND_FORMATS[backend]
        graphs = self.model(role).graphs
        if fmt not in graphs:
            have = ", ".join(k for k, v in BACKEND_FORMATS.items() if v in graphs) or "none"
            raise OmniDraftError(f"bundle {self.root} has no {fmt} graph for the {role} (backends here: {have})")
        return self.root / graphs[fmt]

    def tokenizer_dir(self, role: str) -> Path:
        return self.root / self.model(role).tokenizer

    def check_draft_len(self, draft_len: int) -> None:
        if draft_len > self.max_draft_len:
            raise OmniDraftError(
                f"draft length {draft_len} exceeds the bundle's exported maximum of {self.max_draft_len}"
            )


def load_bundle(root: str | Path, verify_hashes: bool = True) -> Bundle:
    root = Path(root)
    if not root.is_dir():
        raise OmniDraftError(f"bundle folder not found: {root}")
    path = root / "bundle.json"
    if not path.is_file():
        raise OmniDraftError(f"not a bundle (no bundle.json): {root}")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise OmniDraftError(f"bundle.json in {root} is corrupt ({type(e).__name__})") from None
    manifest = read_manifest(raw, path)
    for rel, entry in manifest.files.items():
        f = root / rel
        if not f.is_file():
            raise OmniDraftError(f"bundle {root} is missing {rel}")
        if f.stat().st_size != entry["size"]:
            raise OmniDraftError(f"bundle file {rel} has the wrong size (corrupt or replaced); re-export the bundle")
        if verify_hashes and sha256_file(f) != entry["sha256"]:
            raise OmniDraftError(f"bundle file {rel} does not match its sha256 (corrupt or replaced); re-export the bundle")
    return Bundle(root, manifest)


class ManifestError(OmniDraftError):
    """bundle.json is not a readable manifest; `field` names what is wrong ("format", "version" or a field path)."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


def read_manifest(raw, path: Path) -> Manifest:
    """bundle.json's JSON, checked in full: format, version, then every field (ManifestError naming it).
    The app's core reads the same fields with the same checks (android_demo: BundleManifest.java)."""
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise ManifestError(f"{path} is not an OmniDraft bundle manifest", "format")
    if raw.get("version") not in READABLE_VERSIONS:
        raise ManifestError(f"bundle version {raw.get('version')} is not supported (this omnidraft reads versions "
                            f"{', '.join(map(str, READABLE_VERSIONS))}); re-export it", "version")
    try:
        return Manifest.parse(raw)
    except (KeyError, TypeError, ValueError) as e:
        field = e.args[0] if e.args and isinstance(e.args[0], str) else str(e)
        raise ManifestError(f"bundle.json in {path.parent} is missing field (or has a bad value) {e}", field) from None


def check_policy(policy) -> None:
    """ValueError naming the first field of a policy section that is missing or out of its range."""
    _need(isinstance(policy, dict), "policy")
    for section, fields in POLICY_FIELDS.items():
        values = policy.get(section)
        _need(isinstance(values, dict), f"policy.{section}")
        for name, kind in fields.items():
            v, where = values.get(name), f"policy.{section}.{name}"
            if isinstance(kind, int):
                _need(isinstance(v, list) and len(v) == kind and all(_finite(x) for x in v), where)
            elif kind == "count":
                _positive(v, where)
            else:
                _need(_finite(v) and v > 0 and (kind == "positive" or v <= 1), where)


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _need(ok: bool, field: str) -> None:
    if not ok:
        raise ValueError(field)


def _positive(value, field: str) -> int:
    _need(isinstance(value, int) and not isinstance(value, bool) and value >= 1, field)
    return value


def _relative(path, field: str) -> str:
    _need(isinstance(path, str) and path and not Path(path).is_absolute() and ".." not in Path(path).parts, field)
    return path


def check_tokenizer(bundle: Bundle, role: str, vocab) -> None:
    """The tokenizer found in the bundle must be the one the graph was exported with."""
    want = bundle.model(role).tokenizer_fingerprint
    if vocab.fingerprint != want:
        raise OmniDraftError(f"bundle {role} tokenizer does not match the exported model (fingerprint {vocab.fingerprint} != {want})")
