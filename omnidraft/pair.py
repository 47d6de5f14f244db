"""Assemble a (target, drafter) pair ready to generate, in one place: `open_pair(PairOptions)`.

From the options it loads the models (eager checkpoints, or a validated bundle on
ExecuTorch / onnxruntime), builds the runners, the proposer (the drafter with its
n-gram cache and acceptance head, lookup with its history, or the hybrid of both),
the online adapter, and the decoder that wires them together, each from its state
file (omnidraft/state.py). The CLI, the simulator, the benchmarks and the tests all
build their pairs here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import state
from .draft_head import apply_draft_head
from .errors import OmniDraftError
from .models import DEFAULT_TARGET, load_model, load_vocab, resolve_model_path, resolve_pair_paths
from .progress import log
from .runtime.acceptance import NO_HEAD, AcceptanceHead, n_features
from .runtime.decoding import SpeculativeDecoder
from .runtime.drafting import DraftModel
from .runtime.hybrid import Hybrid
from .runtime.ngram_cache import CacheFileError, NGramCache, load_or_fresh
from .runtime.runner import EagerRunner
from .runtime.vocab import Vocab

# Who proposes tokens: the drafter and lookup under the hybrid policy (the CLI's default),
# the drafter alone, or lookup alone (no drafter model is loaded).
PROPOSERS = ("hybrid", "drafter", "lookup")
BACKENDS = ("eager", "executorch", "onnxruntime")

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
class PairOptions:
    """Everything that decides how a pair is assembled (the CLI fills it from its options)."""

    target: str | None = None  # checkpoint folder (eager); default Gemma-3-270M
    drafter: str | None = None  # checkpoint folder (eager); default: models.resolve_pair_paths
    backend: str = "eager"
    bundle: Path | None = None  # exported bundle (executorch and onnxruntime backends)
    threads: int | None = None
    max_context: int = 512  # eager target's KV cache (the drafter gets twice as much)
    speculative: bool = True  # False: the target alone, through the same loop (the baseline)
    proposer: str = "drafter"
    use_ngram_cache: bool = True
    ngram_cache_size: int = 20_000
    use_history: bool = True  # lookup: read and write the profile's history (else the current text only)
    history_tokens: int = 1_000_000
    draft_len: int | str | None = None  # N, "auto" or "heuristic"; None: auto when the drafter has a head, else 4
    max_draft_len: int | None = None  # None: 8, or the bundle's exported maximum if smaller
    gamma: float = 0.5
    predictor: object = None  # PredictorConfig for the acceptance head's online training (auto)
    adapt: object = None  # AdaptConfig: the drafter learns online (LoRA), or None
    profile: str = "default"  # whose learned state (adapter, head, lookup history)
    reset: bool = False  # set the profile's learned state aside and start fresh
    drafter_backend: str | None = None  # run the drafter on another backend (the simulator adapts so)
    lora_drafter: bool = False  # run the LoRA-input drafter graph (on-device adaptation) even without adapt
    verify_hashes: bool = True


@dataclass
class Pair:
    decoder: SpeculativeDecoder
    target_name: str
    drafter_name: str | None
    target_vocab: Vocab
    bundle: object = None  # the loaded Bundle when running exported graphs
    draft: dict = field(default_factory=dict)  # GenerationConfig's draft-length fields, resolved for this pair
    cache_path: Path | None = None  # where each piece of learned state is saved (None: not saved)
    predictor_path: Path | None = None
    adapter_path: Path | None = None
    history_path: Path | None = None
    costs_path: Path | None = None

    def encode_prompt(self, text: str, chat: bool = False) -> list[int]:
        if not text.strip():
            raise OmniDraftError("the prompt is empty")
        if chat:
            return self.encode_chat([{"role": "user", "content": text}])
        return self.target_vocab.tokenizer.encode(text, add_special_tokens=True)

    def encode_chat(self, messages: list[dict]) -> list[int]:
        """A conversation (roles user/assistant) in the target's chat format, ready for its reply.

        Control tokens come only from the template: each message's text is tokenized as text,
        so a message that contains e.g. "<end_of_turn>" cannot forge a turn boundary.
        """
        tok = self.target_vocab.tokenizer
        marks = [f"\ue000{i}\ue001" for i in range(len(messages))]  # private-use placeholders
        shell = [{"role": m["role"], "content": mark} for m, mark in zip(messages, marks)]
        if getattr(tok, "chat_template", None):
            rendered = tok.apply_chat_template(shell, tokenize=False, add_generation_prompt=True)
            ids = []
        elif "<start_of_turn>" in tok.get_vocab():
            rendered = "".join(GEMMA_TURN.format(role="model" if m["role"] == "assistant" else "user",
                                                 content=m["content"]) for m in shell) + "<start_of_turn>model\n"
            ids = [tok.bos_token_id] if tok.bos_token_id is not None else []
        else:
            raise OmniDraftError(f"target {self.target_name} has no chat template; drop --chat")
        start = 0
        for message, mark in zip(messages, marks):
            at = rendered.index(mark, start)
            ids += tok.encode(rendered[start:at], add_special_tokens=False)  # the template's own control tokens
            ids += tok.encode(message["content"], add_special_tokens=False, split_special_tokens=True)
            start = at + len(mark)
        return ids + tok.encode(rendered[start:], add_special_tokens=False)

    def eos_ids(self, chat: bool = False) -> frozenset[int]:
        return eos_ids(self.target_vocab.tokenizer, chat)

    def save_cache(self) -> None:
        """Save what the pair learned online (n-gram cache, acceptance head, lookup history); warn, never fail."""
        from .lookup_history import save_lookup

        lookup = self.decoder.lookup
        tv = self.target_vocab
        hybrid = self.decoder.proposer if isinstance(self.decoder.proposer, Hybrid) else None
        for what, item, path in (("n-gram cache", self.decoder.ngram_cache, self.cache_path),
                                 ("acceptance head", self.decoder.predictor, self.predictor_path),
                                 ("lookup history", lookup, self.history_path),
                                 ("measured costs", hybrid, self.costs_path)):
            if item is None or path is None:
                continue
            try:
                if item is lookup:
                    save_lookup(path, lookup, tv.fingerprint, len(tv), log)
                elif item is hybrid:
                    import json

                    from .atomic import write_bytes_atomic

                    write_bytes_atomic(path, json.dumps(hybrid.state()).encode())
                elif item is self.decoder.ngram_cache:
                    item.save(path, self.vocab_sizes())
                else:
                    item.save(path)
            except OSError as e:
                log(f"[omnidraft] warning: could not save the {what} to {path}: {e.strerror or e}")
            except Exception as e:  # noqa: BLE001 - a bug must not cost the user what was generated
                log(f"[omnidraft] warning: could not save the {what} to {path}: {type(e).__name__}: {e}")

    def vocab_sizes(self) -> tuple[int, int] | None:
        """(drafter, target) vocabulary sizes: the range of ids a state file may hold."""
        bridge = self.decoder.bridge
        return (len(bridge.draft), len(bridge.target)) if bridge is not None else None


def check_profile(profile: str) -> None:
    """Profile names become file names: keep them plain."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", profile):
        raise OmniDraftError(f"profile name {profile!r}: use letters, digits, '.', '_' or '-' (at most 64)")


def open_pair(o: PairOptions) -> Pair:
    """The pair the options describe, fully wired; every option is checked before any model loads."""
    if o.proposer not in PROPOSERS:
        raise OmniDraftError(f"proposer {o.proposer!r}: choose from {', '.join(PROPOSERS)}")
    if o.backend not in BACKENDS:
        raise OmniDraftError(f"backend {o.backend!r}: choose from {', '.join(BACKENDS)}")
    check_profile(o.profile)
    _clean_state_folders()
    with_drafter = o.speculative and o.proposer != "lookup"
    if o.adapt is not None and not with_drafter:
        raise OmniDraftError("adaptation trains the drafter: use --proposer hybrid or drafter, with speculation")
    if o.backend == "eager":
        if o.bundle is not None:
            raise OmniDraftError("--bundle runs on --backend executorch or onnxruntime, not eager")
        if o.max_context < 2:
            raise OmniDraftError("max context must be at least 2")
        models = _eager_models(o, with_drafter)
    else:
        if o.bundle is None:
            raise OmniDraftError(f"--backend {o.backend} needs --bundle DIR (make one with `omnidraft export`)")
        if o.target or o.drafter:
            raise OmniDraftError("--target/--drafter do not apply to a bundle: its models are fixed at export")
        models = _bundle_models(o, with_drafter)
    target, target_vocab, target_name, drafter, draft_vocab, drafter_name, bundle = models
    pair = Pair(SpeculativeDecoder(target, target_vocab), target_name, drafter_name,
                target_vocab.padded(target.vocab_size), bundle)
    if not o.speculative:
        return pair
    pair.draft = _draft_options(o, drafter, bundle)
    drafting = None
    if drafter is not None:
        drafting = DraftModel.between(target, target_vocab, drafter, draft_vocab)
        seed = bundle.root / bundle.manifest.ngram_cache if bundle and bundle.manifest.ngram_cache else None
        drafting.ngram_cache, pair.cache_path = _open_cache(drafting.bridge, drafter_name, target_name, o, seed)
        if pair.draft["draft_policy"] == "auto":
            drafting.predictor, pair.predictor_path = _open_predictor(drafting, drafter_name, target_name, o)
    lookup = None
    if o.proposer != "drafter":
        from .lookup_history import open_lookup

        fp = pair.target_vocab.fingerprint
        pair.history_path = state.history_path(target_name, fp, o.profile) if o.use_history else None
        lookup = open_lookup(pair.history_path, fp, len(pair.target_vocab), o.history_tokens, log, o.reset)
    adapter = None
    if o.adapt is not None:
        adapter, pair.adapter_path = _open_adapter(pair, drafting, o)
    proposer = drafting if o.proposer == "drafter" else Hybrid(lookup, drafting)
    if o.proposer == "hybrid" and drafting is not None:
        pair.costs_path = state.costs_path(target_name, drafter_name, f"{target.backend}-{drafter.backend}")
        _load_costs(proposer, pair.costs_path)
    pair.decoder = SpeculativeDecoder(target, target_vocab, proposer, adapter)
    return pair


def _load_costs(hybrid: Hybrid, path: Path) -> None:
    """What the hybrid measured in earlier runs on this machine (a damaged file is set aside)."""
    import json

    if not path.exists():
        return
    try:
        hybrid.load_state(json.loads(path.read_bytes()))
    except (OSError, ValueError, KeyError, TypeError) as e:
        state.set_aside(path, "bad", f"costs file {path.name} is unreadable or damaged ({e}); measuring afresh", log)


def _clean_state_folders() -> None:
    """Temporaries a killed process left in the state folders (old enough not to be a live writer's)."""
    from .atomic import remove_stale_temporaries

    for folder in ("ngram", "adapters", "history", "costs"):
        removed = remove_stale_temporaries(state.omnidraft_home() / folder)
        if removed:
            log(f"[omnidraft] removed {len(removed)} temporary file(s) left by a killed process in {folder}/")


def _eager_models(o: PairOptions, with_drafter: bool):
    if with_drafter:  # both checked first
        target_path, drafter_path = resolve_pair_paths(o.target, o.drafter)
    else:
        target_path, drafter_path = resolve_model_path(o.target, DEFAULT_TARGET), None
    target_vocab = load_vocab(target_path)
    target = EagerRunner(load_model(target_path), o.max_context, name="target")
    if drafter_path is None:
        return target, target_vocab, target_path.name, None, None, None, None
    draft_vocab = load_vocab(drafter_path)
    model = load_model(drafter_path)
    apply_draft_head(model, drafter_path)
    # Draft tokens can be shorter than target tokens: give the drafter twice the room.
    drafter = EagerRunner(model, 2 * o.max_context, name="drafter",
                          head=AcceptanceHead.initial(n_features(model.config)))
    return target, target_vocab, target_path.name, drafter, draft_vocab, drafter_path.name, None


def _bundle_models(o: PairOptions, with_drafter: bool):
    from .bundle import check_tokenizer, load_bundle

    bundle = load_bundle(o.bundle, verify_hashes=o.verify_hashes)
    vocabs = {}
    for role in ("target", "drafter") if with_drafter else ("target",):
        vocabs[role] = load_vocab(bundle.tokenizer_dir(role))
        check_tokenizer(bundle, role, vocabs[role])
    target = open_runner(bundle, "target", o.backend, o.threads)
    names = {role: bundle.model(role).name for role in ("target", "drafter")}
    if not with_drafter:
        return target, vocabs["target"], names["target"], None, None, None, bundle
    drafter_backend = o.drafter_backend or o.backend
    if o.adapt is not None or o.lora_drafter:
        _training_section(bundle, drafter_backend)
        drafter = open_runner(bundle, "drafter", drafter_backend, o.threads, graph="executorch_lora")
    else:
        drafter = open_runner(bundle, "drafter", drafter_backend, o.threads)
    return target, vocabs["target"], names["target"], drafter, vocabs["drafter"], names["drafter"], bundle


def _draft_options(o: PairOptions, drafter, bundle) -> dict:
    """GenerationConfig's draft-length fields: 'auto' when the drafter has an acceptance head (else 4 per
    round), capped at 8 or the bundle's exported maximum; explicit values are checked against it."""
    bundle_max = bundle.max_draft_len if bundle is not None else None
    cap = o.max_draft_len if o.max_draft_len is not None else min(8, bundle_max or 8)
    draft_len = o.draft_len
    if draft_len is None:
        draft_len = "auto" if drafter is None or drafter.has_head else min(4, cap)
    if draft_len == "auto" and drafter is not None and not drafter.has_head:
        raise OmniDraftError(NO_HEAD)
    if bundle is not None:
        bundle.check_draft_len(draft_len if isinstance(draft_len, int) else cap)
    fixed = isinstance(draft_len, int)
    return {"draft_policy": "fixed" if fixed else draft_len, "draft_len": draft_len if fixed else 4,
            "max_draft_len": cap, "gamma": o.gamma}


def _open_cache(bridge, drafter_name, target_name, o: PairOptions, seed_file=None):
    """The pair's n-gram cache and its path (seeded from a bundle's copy if absent)."""
    if not o.use_ngram_cache or bridge.identity:
        return None, None
    pair_id, size = bridge.pair_id, o.ngram_cache_size
    path = state.ngram_path(drafter_name, target_name, pair_id)
    sizes = (len(bridge.draft), len(bridge.target))
    if path.exists() or seed_file is None:
        return load_or_fresh(path, pair_id, size, log, sizes), path
    try:  # first run of a bundle: start from the cache it shipped with (never modify the bundle)
        return NGramCache.load(seed_file, pair_id, size, sizes), path
    except CacheFileError as e:
        log(f"[omnidraft] warning: the bundle's n-gram cache is {e}; starting a fresh cache")
        return NGramCache(pair_id, size), path


def _open_predictor(drafting: DraftModel, drafter_name, target_name, o: PairOptions):
    """The acceptance head's online trainer (for --draft-len auto), resumed from the profile's file."""
    from .adaptation.predictor import AcceptancePredictor

    predictor = AcceptancePredictor(drafting.drafter.head, o.predictor)
    path = state.head_path(drafter_name, target_name, drafting.bridge.pair_id, o.profile)
    if path.exists() and o.reset:
        state.set_aside(path, "reset", "adaptation reset: starting a fresh acceptance head", log)
    elif path.exists():
        try:
            predictor.load(path)
        except ValueError as e:
            state.set_aside(path, "bad", f"acceptance head {path.name} is {e}; starting a fresh head", log)
    return predictor, path


def _open_adapter(pair: Pair, drafting: DraftModel, o: PairOptions):
    """The drafter's online adapter for the profile (eager LoRA, or the bundle's ExecuTorch training program,
    whose fixed shapes then decide the examples per step and their window, as on the phone)."""
    from .adaptation.online import attach

    config = o.adapt
    if pair.bundle is not None and drafting.drafter is not None:
        training = _training_section(pair.bundle, drafting.drafter.backend)
        config = replace(config, batch=int(training["batch"]), window=int(training["window"]))
    learner = learner_for(pair.bundle, drafting, config)
    path = state.adapter_path(pair.drafter_name, pair.target_name, drafting.bridge.pair_id, o.profile)
    meta = {"drafter": pair.drafter_name, "target": pair.target_name}
    try:
        return attach(learner, drafting.bridge, config, path, meta, o.reset, warn=log), path
    except ValueError as e:
        raise OmniDraftError(str(e)) from None


def learner_for(bundle, drafting: DraftModel, config, init=None):
    """What an OnlineAdapter trains: the eager drafter model, or the bundle's ExecuTorch training program.

    `init`: LoRA tensors by name for the ExecuTorch learner to start from (default: the program's own)."""
    drafter = drafting.drafter if drafting is not None else None
    if drafter is None:
        raise OmniDraftError("adaptation needs a drafter (drop --no-speculation)")
    if bundle is not None:
        return _executorch_learner(bundle, drafting, config, init)
    if drafter.backend == "eager":
        return drafter.model
    raise OmniDraftError(f"adaptation runs on the eager or executorch backend, not {drafter.backend}")


def lora_input_names(bundle, backend: str = "executorch") -> list[str]:
    """The drafter's LoRA tensors in the order the bundle's programs take them."""
    return [name for name, _shape in _training_section(bundle, backend)["lora_inputs"]]


def _executorch_learner(bundle, drafting: DraftModel, config, init=None):
    from .adaptation.examples import Mapping
    from .adaptation.learners import ExecuTorchLearner

    drafter = drafting.drafter
    training = _training_section(bundle, drafter.backend)
    graphs = bundle.model("drafter").graphs
    names = lora_input_names(bundle, drafter.backend)
    n_mapped = len(Mapping.from_bridge(drafting.bridge))
    if n_mapped != training["mapped"]:
        raise OmniDraftError("the bundle's training graph was exported for another vocabulary mapping")
    if config.batch > training["batch"]:
        raise OmniDraftError(f"the bundle's training program takes at most {training['batch']} examples per step, "
                             f"not {config.batch}: re-export with --train-batch {config.batch}")
    try:
        return ExecuTorchLearner(bundle.root / graphs["executorch_train"], names, int(training["window"]),
                                 int(training["batch"]), n_mapped, config.lr, drafter, init, config.warmup)
    except Exception as e:  # noqa: BLE001 - a damaged or foreign program is a user problem
        raise OmniDraftError(f"cannot load the bundle's training program: {str(e).splitlines()[0][:200]}") from e


def _training_section(bundle, backend: str) -> dict:
    """The bundle's training programs' description; on-device adaptation needs it, on ExecuTorch."""
    training = bundle.manifest.training
    if not training:
        raise OmniDraftError("--adapt needs a bundle exported --with-training (its LoRA training program)")
    if backend != "executorch":
        raise OmniDraftError("on-device adaptation runs on --backend executorch (its training program)")
    if "update" not in training:
        raise OmniDraftError("the bundle's training program is of an older format (version 3, SGD through ExecuTorch's "
                             "training API): re-export it with --with-training")
    return training


def open_runner(bundle, role: str, backend: str, threads: int | None, graph: str | None = None):
    """A runner over the bundle's graph for `role` on `backend` (onnxruntime or executorch).

    graph: another of the role's graphs by its bundle.json key (e.g. "executorch_lora", whose runner
    owns zero LoRA tensors as extra inputs until a learner updates them).
    """
    entry = bundle.model(role)
    meta = entry.to_dict()
    path = bundle.root / entry.graphs[graph] if graph else bundle.graph_path(role, backend)
    if backend == "onnxruntime":
        from .runtime.onnx_runner import OnnxRunner

        return OnnxRunner(path, meta, threads=threads, name=role)
    from .runtime.executorch_runner import ExecuTorchRunner

    lora = bundle.manifest.training["lora_inputs"] if graph == "executorch_lora" else []
    return ExecuTorchRunner(path, meta, name=role, extra_shapes=[shape for _name, shape in lora])


def build_eager_pair(target: str | None = None, drafter: str | None = None, speculative: bool = True,
                     max_context: int = 512, use_ngram_cache: bool = True, **options) -> Pair:
    """open_pair on the eager backend (the benchmarks' and tests' shorthand)."""
    return open_pair(PairOptions(target=target, drafter=drafter, speculative=speculative, max_context=max_context,
                                 use_ngram_cache=use_ngram_cache, **options))


def build_bundle_pair(bundle_dir, backend: str, speculative: bool = True, threads: int | None = None,
                      use_ngram_cache: bool = True, **options) -> Pair:
    """open_pair over an exported bundle (the benchmarks' and tests' shorthand)."""
    return open_pair(PairOptions(bundle=Path(bundle_dir), backend=backend, speculative=speculative, threads=threads,
                                 use_ngram_cache=use_ngram_cache, **options))
