"""Assemble a (target, drafter) pair ready to generate: models, tokenizers, runners,
the pair's n-gram cache, prompts (plain or chat) and end-of-sequence ids.

The CLI, the benchmarks and the tests all build their decoders here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import OmniDraftError
from .draft_head import apply_draft_head
from .models import DEFAULT_DRAFTER, DEFAULT_TARGET, load_model, load_tokenizer, omnidraft_home, resolve_model_path
from .progress import log
from .runtime.acceptance import NO_HEAD, AcceptanceHead, n_features
from .runtime.decoding import SpeculativeDecoder
from .runtime.drafting import DraftModel
from .runtime.hybrid import Hybrid
from .runtime.ngram_cache import CacheFileError, NGramCache, load_or_fresh
from .runtime.runner import EagerRunner
from .runtime.vocab import Vocab

# Who proposes tokens: the drafter and lookup under the hybrid policy (the default),
# the drafter alone, or lookup alone (no drafter model is loaded).
PROPOSERS = ("hybrid", "drafter", "lookup")

# Gemma 3's turn format, for Gemma checkpoints whose tokenizer ships no chat template
# (the GGUF of the base 270M model has none).
GEMMA_TURN = "<start_of_turn>{role}\n{content}<end_of_turn>\n"


def eos_ids(tokenizer, chat: bool = False) -> frozenset[int]:
    """Target ids that end generation: EOS, and in a chat also the end-of-turn token."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    if chat:
        vocab = tokenizer.get_vocab()
        ids |= {vocab[end] for end in ("<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|end|>") if end in vocab}
    return frozenset(ids)


@dataclass
class Pair:
    decoder: SpeculativeDecoder
    target_name: str
    drafter_name: str | None
    target_vocab: Vocab
    cache_path: Path | None
    bundle: object = None  # the loaded Bundle when running exported graphs
    adapter_path: Path | None = None  # where the drafter's adapter is saved, once one is attached
    predictor_path: Path | None = None  # where the acceptance head is saved, once it learns online
    history_path: Path | None = None  # where the lookup history is saved, once lookup is on

    def encode_prompt(self, text: str, chat: bool = False) -> list[int]:
        if not text.strip():
            raise OmniDraftError("the prompt is empty")
        if chat:
            return self.encode_chat([{"role": "user", "content": text}])
        return self.target_vocab.tokenizer.encode(text, add_special_tokens=True)

    def encode_chat(self, messages: list[dict]) -> list[int]:
        """A conversation (roles user/assistant) in the target's chat format, ready for its reply."""
        tok = self.target_vocab.tokenizer
        if getattr(tok, "chat_template", None):
            rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            return tok.encode(rendered, add_special_tokens=False)
        if "<start_of_turn>" in tok.get_vocab():
            turns = "".join(
                GEMMA_TURN.format(role="model" if m["role"] == "assistant" else "user", content=m["content"])
                for m in messages
            )
            return tok.encode(turns + "<start_of_turn>model\n", add_special_tokens=True)
        raise OmniDraftError(f"target {self.target_name} has no chat template; drop --chat")

    def eos_ids(self, chat: bool = False) -> frozenset[int]:
        return eos_ids(self.target_vocab.tokenizer, chat)

    def save_cache(self) -> None:
        """Save what the pair learned online (n-gram cache, acceptance head, lookup history); warn, never fail."""
        from .lookup_history import save_lookup

        lookup = self.decoder.lookup
        tv = self.target_vocab
        for what, state, path in (("n-gram cache", self.decoder.ngram_cache, self.cache_path),
                                  ("acceptance head", self.decoder.predictor, self.predictor_path),
                                  ("lookup history", lookup, self.history_path)):
            if state is None or path is None:
                continue
            try:
                if state is lookup:
                    save_lookup(path, lookup, tv.fingerprint, len(tv), log)
                else:
                    state.save(path)
            except OSError as e:
                log(f"[omnidraft] warning: could not save the {what} to {path}: {e.strerror or e}")


def check_profile(profile: str) -> None:
    """Profile names become file names: keep them plain."""
    import re

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", profile):
        raise OmniDraftError(f"profile name {profile!r}: use letters, digits, '.', '_' or '-' (at most 64)")


def attach_adapter(pair: Pair, config, profile: str = "default", reset: bool = False):
    """Make the pair's drafter learn online; its adapter lives in $OMNIDRAFT_HOME/adapters.

    One adapter per (drafter, target, profile): a user can keep e.g. "code" and
    "mail" apart. The adapter trains the eager drafter in place, or, on a bundle
    exported --with-training, steps through its ExecuTorch training program.
    """
    from .adaptation.online import attach

    dec = pair.decoder
    learner = learner_for(pair, config)
    check_profile(profile)
    path = omnidraft_home() / "adapters" / f"{pair.drafter_name}--{pair.target_name}--{dec.bridge.pair_id}--{profile}.pt"
    meta = {"drafter": pair.drafter_name, "target": pair.target_name}
    try:
        dec.adapter = attach(learner, dec.bridge, config, path, meta, reset, warn=log)
    except ValueError as e:
        raise OmniDraftError(str(e)) from None
    return path


def attach_predictor(pair: Pair, config=None, profile: str = "default", reset: bool = False) -> Path:
    """Make the drafter's acceptance head learn online (for --draft-len auto); saved next to the adapters."""
    from .state import set_aside
    from .adaptation.predictor import AcceptancePredictor

    dec = pair.decoder
    if dec.drafter is None or not dec.drafter.has_head:
        raise OmniDraftError(NO_HEAD)
    check_profile(profile)
    dec.drafting.predictor = AcceptancePredictor(dec.drafter.head, config)
    path = omnidraft_home() / "adapters" / f"{pair.drafter_name}--{pair.target_name}--{dec.bridge.pair_id}--{profile}.head.npz"
    pair.predictor_path = path
    if path.exists() and reset:
        set_aside(path, "reset", "adaptation reset: starting a fresh acceptance head", log)
    elif path.exists():
        try:
            dec.predictor.load(path)
        except ValueError as e:
            set_aside(path, "bad", f"acceptance head {path.name} is {e}; starting a fresh head", log)
    return path


def learner_for(pair: Pair, config):
    """What OnlineAdapter trains: the eager drafter model, or the bundle's ExecuTorch training program."""
    drafter = pair.decoder.drafter
    if drafter is None:
        raise OmniDraftError("adaptation needs a drafter (drop --no-speculation)")
    if pair.bundle is not None:
        return _executorch_learner(pair, config)
    if hasattr(drafter, "model"):
        return drafter.model
    raise OmniDraftError(f"adaptation runs on the eager or executorch backend, not {drafter.backend}")


def _executorch_learner(pair: Pair, config):
    from .adaptation.examples import Mapping
    from .adaptation.learners import ExecuTorchLearner

    bundle, drafter = pair.bundle, pair.decoder.drafter
    training = _training_section(bundle, drafter.backend)
    graphs = bundle.model("drafter")["graphs"]
    names = [name for name, _shape in training["lora_inputs"]]
    n_mapped = len(Mapping.from_bridge(pair.decoder.bridge))
    if n_mapped != training["mapped"]:
        raise OmniDraftError("the bundle's training graph was exported for another vocabulary mapping")
    return ExecuTorchLearner(bundle.root / graphs["executorch_train"], names, int(training["window"]), n_mapped,
                             config.lr, drafter)


def _training_section(bundle, backend: str) -> dict:
    """The bundle's training programs' description; on-device adaptation needs it, on ExecuTorch."""
    training = bundle.manifest.get("training")
    if not training or backend != "executorch":
        raise OmniDraftError("on-device adaptation needs --backend executorch and a bundle exported --with-training")
    return training


def _open_cache(bridge, drafter_name, target_name, use_ngram_cache, size, seed_file=None):
    """The pair's n-gram cache and its path in $OMNIDRAFT_HOME (seeded from a bundle's copy if absent)."""
    if not use_ngram_cache or bridge.identity:
        return None, None
    pair_id = bridge.pair_id
    path = omnidraft_home() / "ngram" / f"{drafter_name}--{target_name}--{pair_id}.json"
    if path.exists() or seed_file is None:
        return load_or_fresh(path, pair_id, size, warn=log), path
    try:  # first run of a bundle: start from the cache it shipped with (never modify the bundle)
        return NGramCache.load(seed_file, pair_id, size), path
    except CacheFileError as e:
        log(f"[omnidraft] warning: the bundle's n-gram cache is {e}; starting a fresh cache")
        return NGramCache(pair_id, size), path


@dataclass
class LookupOptions:
    """Lookup's history: per (target, profile) in $OMNIDRAFT_HOME/history, or none (context only)."""

    profile: str = "default"
    use_history: bool = True
    max_tokens: int = 1_000_000
    reset: bool = False


def _open_lookup(target_name: str, target_vocab: Vocab, options: LookupOptions):
    from .lookup_history import history_path, open_lookup

    path = None
    if options.use_history:
        check_profile(options.profile)
        path = history_path(target_name, target_vocab.fingerprint, options.profile)
    lookup = open_lookup(path, target_vocab.fingerprint, len(target_vocab), options.max_tokens, log, options.reset)
    return lookup, path


def _assemble(target, target_vocab, target_name, proposer: str, lookup_options, drafter=None, draft_vocab=None,
              drafter_name=None, use_ngram_cache=True, cache_size=20_000, seed_file=None, bundle=None) -> Pair:
    """The decoder for `proposer` ("hybrid", "drafter" or "lookup") over ready runners."""
    if proposer not in PROPOSERS:
        raise OmniDraftError(f"proposer {proposer!r}: choose from {', '.join(PROPOSERS)}")
    drafting, cache_path, lookup, history = None, None, None, None
    if drafter is not None:
        drafting = DraftModel.between(target, target_vocab, drafter, draft_vocab)
        drafting.ngram_cache, cache_path = _open_cache(drafting.bridge, drafter_name, target_name, use_ngram_cache,
                                                       cache_size, seed_file)
    padded = target_vocab.padded(target.vocab_size)
    if proposer in ("hybrid", "lookup"):
        lookup, history = _open_lookup(target_name, padded, lookup_options or LookupOptions())
    chosen = drafting if proposer == "drafter" else Hybrid(lookup, drafting)
    decoder = SpeculativeDecoder(target, target_vocab, chosen)
    return Pair(decoder, target_name, drafter_name, decoder.target_vocab, cache_path, bundle, history_path=history)


def build_eager_pair(
    target: str | None = None,
    drafter: str | None = None,
    speculative: bool = True,
    max_context: int = 512,
    use_ngram_cache: bool = True,
    ngram_cache_size: int = 20_000,
    proposer: str = "drafter",
    lookup: LookupOptions | None = None,
) -> Pair:
    """Load models from checkpoint folders (or the prepared defaults) on the eager backend."""
    if max_context < 2:
        raise OmniDraftError("max context must be at least 2")
    target_path = resolve_model_path(target, DEFAULT_TARGET)
    drafter_path = resolve_model_path(drafter, DEFAULT_DRAFTER) if speculative and proposer != "lookup" else None
    target_vocab = Vocab.from_tokenizer(load_tokenizer(target_path))
    target_runner = EagerRunner(load_model(target_path), max_context, name="target")
    if not speculative:
        decoder = SpeculativeDecoder(target_runner, target_vocab)
        return Pair(decoder, target_path.name, None, decoder.target_vocab, None)
    drafter_runner = draft_vocab = None
    if drafter_path is not None:
        draft_vocab = Vocab.from_tokenizer(load_tokenizer(drafter_path))
        drafter_model = load_model(drafter_path)
        apply_draft_head(drafter_model, drafter_path)
        # Draft tokens can be shorter than target tokens: give the drafter twice the room.
        drafter_runner = EagerRunner(drafter_model, 2 * max_context, name="drafter")
        drafter_runner.head = AcceptanceHead.initial(n_features(drafter_runner.model.config))
    return _assemble(target_runner, target_vocab, target_path.name, proposer, lookup, drafter_runner, draft_vocab,
                     drafter_path.name if drafter_path else None, use_ngram_cache, ngram_cache_size)


def open_runner(bundle, role: str, backend: str, threads: int | None, graph: str | None = None):
    """A runner over the bundle's graph for `role` on `backend` (onnxruntime or executorch).

    graph: another of the role's graphs by its bundle.json key (e.g. "executorch_lora").
    """
    meta = bundle.model(role)
    path = bundle.root / meta["graphs"][graph] if graph else bundle.graph_path(role, backend)
    if backend == "onnxruntime":
        from .runtime.onnx_runner import OnnxRunner

        return OnnxRunner(path, meta, threads=threads, name=role)
    from .runtime.executorch_runner import ExecuTorchRunner

    return ExecuTorchRunner(path, meta, name=role)


def build_bundle_pair(
    bundle_dir,
    backend: str,
    speculative: bool = True,
    threads: int | None = None,
    use_ngram_cache: bool = True,
    ngram_cache_size: int = 20_000,
    verify_hashes: bool = True,
    lora_drafter: bool = False,
    drafter_backend: str | None = None,
    proposer: str = "drafter",
    lookup: LookupOptions | None = None,
) -> Pair:
    """Load an exported bundle (validated) and run it on onnxruntime or ExecuTorch.

    lora_drafter: run the drafter graph that takes LoRA tensors as inputs (for
    on-device adaptation; needs a bundle exported --with-training).
    drafter_backend: run the drafter on another backend than the target (the
    simulator adapts on onnxruntime this way: only ExecuTorch graphs can train).
    """
    from .bundle import check_tokenizer, load_bundle

    bundle = load_bundle(bundle_dir, verify_hashes=verify_hashes)
    with_drafter = speculative and proposer != "lookup"
    vocabs = {}
    for role in ("target", "drafter") if with_drafter else ("target",):
        vocabs[role] = Vocab.from_tokenizer(load_tokenizer(bundle.tokenizer_dir(role)))
        check_tokenizer(bundle, role, vocabs[role])
    target = open_runner(bundle, "target", backend, threads)
    names = {role: bundle.model(role)["name"] for role in ("target", "drafter")}
    if not speculative:
        decoder = SpeculativeDecoder(target, vocabs["target"])
        return Pair(decoder, names["target"], None, decoder.target_vocab, None, bundle)
    if not with_drafter:
        return _assemble(target, vocabs["target"], names["target"], proposer, lookup, bundle=bundle)
    drafter_backend = drafter_backend or backend
    if lora_drafter:
        import torch

        training = _training_section(bundle, drafter_backend)
        drafter = open_runner(bundle, "drafter", drafter_backend, threads, graph="executorch_lora")
        # Zero adapters until a learner feeds its own: the drafter as exported.
        drafter.extra_inputs = [torch.zeros(shape) for _name, shape in training["lora_inputs"]]
    else:
        drafter = open_runner(bundle, "drafter", drafter_backend, threads)
    seed = bundle.root / bundle.manifest["ngram_cache"] if bundle.manifest.get("ngram_cache") else None
    return _assemble(target, vocabs["target"], names["target"], proposer, lookup, drafter, vocabs["drafter"],
                     names["drafter"], use_ngram_cache, ngram_cache_size, seed, bundle)
