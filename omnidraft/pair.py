"""Assemble a (target, drafter) pair ready to generate, in one place: `open_pair(PairOptions)`.

From the options it loads the models (eager checkpoints, or a validated bundle on
ExecuTorch / onnxruntime), builds the runners, the proposer (the drafter with its
n-gram cache and acceptance head, lookup with its history, or the hybrid of both),
the online adapter, and the decoder that wires them together, each from its state
file (omnidraft/state.py). The CLI, the simulator, the benchmarks and the tests all
build their pairs here.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

from . import state
from .draft_head import apply_draft_head
from .chat import encode_chat, eos_ids
from .adaptation.learners import learner_for, training_section
from .errors import OmniDraftError
from .models import DEFAULT_TARGET, check_context, load_model, load_vocab
from .catalog import resolve_model_path, resolve_pair_paths
from .progress import log
from .request import check_text, whole_number
from .runtime.acceptance import NO_HEAD, AcceptanceHead, n_features
from .runtime.choices import Backend, DraftPolicy, ProposerKind
from .runtime.decoding import SpeculativeDecoder
from .runtime.draft_length import DraftSettings
from .runtime.drafting import DraftModel
from .runtime.bridge import VocabBridge
from .runtime.hybrid import Hybrid, measurements
from .runtime.lookup_proposer import LookupProposer
from .runtime.ngram_cache import CacheFileError, NGramCache, load_or_fresh
from .runtime.runner import EagerRunner
from .runtime.vocab import Vocab
from .store import StateFile


@dataclass
class PairOptions:
    """Everything that decides how a pair is assembled (the CLI fills it from its options)."""

    target: str | None = None  # checkpoint folder (eager); default Gemma-3-270M
    drafter: str | None = None  # checkpoint folder (eager); default: models.resolve_pair_paths
    backend: Backend = Backend.EAGER
    bundle: Path | None = None  # exported bundle (executorch and onnxruntime backends)
    threads: int | None = None
    max_context: int = 4096  # eager target's KV cache (the drafter gets twice as much)
    speculative: bool = True  # False: the target alone, through the same loop (the baseline)
    proposer: ProposerKind = ProposerKind.DRAFTER  # the CLI's default is the hybrid (lookup and the drafter)
    use_ngram_cache: bool = True
    ngram_cache_size: int = 20_000
    use_history: bool = True  # lookup: read and write the profile's history (else the current text only)
    history_tokens: int = 1_000_000
    draft_len: int | DraftPolicy | None = None  # N, auto or heuristic; None: auto when the drafter has a head, else 4
    max_draft_len: int | None = None  # None: 8, or the bundle's exported maximum if smaller
    gamma: float = 0.5
    predictor: object = None  # PredictorConfig for the acceptance head's online training (auto)
    adapt: object = None  # AdaptConfig: the drafter learns online (LoRA), or None
    profile: str = "default"  # whose learned state (adapter, head, lookup history)
    reset: bool = False  # set the profile's learned state aside and start fresh
    drafter_backend: str | None = None  # run the drafter on another backend (the simulator adapts so)
    lora_drafter: bool = False  # run the LoRA-input drafter graph (on-device adaptation) even without adapt
    verify_hashes: bool = True
    private: bool = False  # save nothing derived from prompts or outputs (learned state is still read)

    def check(self) -> None:
        """Every value in range, each with one clear error, before anything loads."""
        if self.proposer not in set(ProposerKind):
            raise OmniDraftError(f"proposer {self.proposer!r}: choose from {', '.join(ProposerKind)}")
        if self.backend not in set(Backend):
            raise OmniDraftError(f"backend {self.backend!r}: choose from {', '.join(Backend)}")
        check_profile(self.profile)
        whole_number("max_context", self.max_context, 2)
        whole_number("history_tokens", self.history_tokens, 0)
        whole_number("ngram_cache_size", self.ngram_cache_size, 1)
        if self.threads is not None:
            whole_number("threads", self.threads, 1)
        if self.max_draft_len is not None:
            whole_number("max_draft_len", self.max_draft_len, 1)
        if self.draft_len is not None and self.draft_len not in set(DraftPolicy):
            whole_number("draft_len (or 'auto', 'heuristic')", self.draft_len, 1)
        if isinstance(self.gamma, bool) or not isinstance(self.gamma, (int, float)) or not 0 < self.gamma < 1:
            raise OmniDraftError(f"gamma must be a number in (0, 1), got {self.gamma!r}")
        if self.private and self.reset:
            raise OmniDraftError("--private changes nothing in the profile, and --reset-adaptation sets its learned "
                                 "state aside: choose one")


@dataclass
class Pair:
    """What open_pair assembled: the decoder, and the parts of it the caller may need by name (each None when
    absent), with where each piece of learned state is saved (None: not saved)."""

    decoder: SpeculativeDecoder
    target_name: str
    drafter_name: str | None
    target_vocab: Vocab
    bundle: object = None  # the loaded Bundle when running exported graphs
    draft: DraftSettings | None = None  # how many tokens to draft, resolved for this pair (None: no speculation)
    drafting: DraftModel | None = None  # the drafter as a proposer (alone, or inside the hybrid)
    lookup: LookupProposer | None = None
    hybrid: Hybrid | None = None
    adapter: object = None  # the OnlineAdapter training the drafter, or None
    cache_path: Path | None = None
    predictor_path: Path | None = None
    adapter_path: Path | None = None
    history_path: Path | None = None
    costs_path: Path | None = None
    private: bool = False  # save nothing this pair learns

    @property
    def drafter(self):
        """The drafter's runner, or None."""
        return self.drafting.drafter if self.drafting is not None else None

    @property
    def bridge(self) -> VocabBridge | None:
        return self.drafting.bridge if self.drafting is not None else None

    @property
    def ngram_cache(self):
        return self.drafting.ngram_cache if self.drafting is not None else None

    @property
    def predictor(self):
        return self.drafting.predictor if self.drafting is not None else None

    @property
    def cross_vocab(self) -> bool:
        return self.drafting is not None and self.drafting.cross_vocab

    def encode_prompt(self, text: str, chat: bool = False) -> list[int]:
        check_text(text, "the prompt")
        if not text.strip():
            raise OmniDraftError("the prompt is empty")
        if chat:
            return self.encode_chat([{"role": "user", "content": text}])
        return self.target_vocab.tokenizer.encode(text, add_special_tokens=True)

    def encode_chat(self, messages: list[dict]) -> list[int]:
        """A conversation (roles user/assistant) in the target's chat format, ready for its reply (chat.py)."""
        for i, m in enumerate(messages):
            check_text(m.get("content", ""), f"message {i + 1}")
        return encode_chat(self.target_vocab.tokenizer, messages, self.target_name)

    def eos_ids(self, chat: bool = False) -> frozenset[int]:
        return eos_ids(self.target_vocab.tokenizer, chat)

    def save_cache(self) -> None:
        """Save what the pair learned online (n-gram cache, acceptance head, lookup history); warn, never fail."""
        for store, write in self._stores():
            store.save(write, log)

    def _stores(self):
        """(StateFile, writer) of each piece of learned state this pair keeps (store.py); none when private."""
        if self.private:
            return
        from .atomic import write_bytes_atomic
        from .lookup_history import save_lookup

        tv, cache, predictor, lookup, hybrid = (self.target_vocab, self.ngram_cache, self.predictor, self.lookup,
                                                 self.hybrid)
        if cache is not None:
            yield StateFile("n-gram cache", self.cache_path), lambda p: cache.save(p, self.vocab_sizes())
        if predictor is not None:
            yield StateFile("acceptance head", self.predictor_path), predictor.save
        if lookup is not None:
            yield StateFile("lookup history", self.history_path), \
                lambda p: save_lookup(p, lookup, tv.fingerprint, len(tv), log)
        if hybrid is not None and self.costs_path is not None:
            yield StateFile("measured costs", self.costs_path), \
                lambda p: write_bytes_atomic(p, json.dumps(hybrid.state()).encode())

    def vocab_sizes(self) -> tuple[int, int] | None:
        """(drafter, target) vocabulary sizes: the range of ids a state file may hold."""
        bridge = self.bridge
        return (len(bridge.draft), len(bridge.target)) if bridge is not None else None


def check_profile(profile: str) -> None:
    """Profile names become file names: keep them plain."""
    if not isinstance(profile, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", profile):
        raise OmniDraftError(f"profile name {profile!r}: use letters, digits, '.', '_' or '-' (at most 64)")


def open_pair(o: PairOptions) -> Pair:
    """The pair the options describe, fully wired; every option is checked before any model loads."""
    o.check()
    o = replace(o, proposer=ProposerKind(o.proposer), backend=Backend(o.backend))
    _clean_state_folders()
    with_drafter = o.speculative and o.proposer != ProposerKind.LOOKUP
    if o.adapt is not None and o.private:
        raise OmniDraftError("--private saves nothing, and adaptation saves what the drafter learns: choose one")
    if o.adapt is not None and not with_drafter:
        raise OmniDraftError("adaptation trains the drafter: use --proposer hybrid or drafter, with speculation")
    if o.backend == Backend.EAGER:
        if o.bundle is not None:
            raise OmniDraftError("--bundle runs on --backend executorch or onnxruntime, not eager")
        models = _eager_models(o, with_drafter)
    else:
        if o.bundle is None:
            raise OmniDraftError(f"--backend {o.backend} needs --bundle DIR (make one with `omnidraft export`)")
        if o.target or o.drafter:
            raise OmniDraftError("--target/--drafter do not apply to a bundle: its models are fixed at export")
        models = _bundle_models(o, with_drafter)
    target, target_vocab, target_name, drafter, draft_vocab, drafter_name, bundle = models
    names = {"target_name": target_name, "drafter_name": drafter_name,
             "target_vocab": target_vocab.padded(target.vocab_size), "bundle": bundle, "private": o.private}
    if not o.speculative:
        return Pair(SpeculativeDecoder(target, target_vocab), **names)
    draft = _draft_settings(o, drafter, bundle)
    drafting = lookup = hybrid = adapter = None
    paths = {}
    if drafter is not None:
        bridge = VocabBridge(draft_vocab.padded(drafter.vocab_size), names["target_vocab"])
        seed = bundle.root / bundle.manifest.ngram_cache if bundle and bundle.manifest.ngram_cache else None
        cache, paths["cache_path"] = _open_cache(bridge, drafter_name, target_name, o, seed)
        predictor = None
        if draft.draft_policy == DraftPolicy.AUTO:
            predictor, paths["predictor_path"] = _open_predictor(drafter.head, bridge, drafter_name, target_name, o)
        drafting = DraftModel(drafter, bridge, cache, predictor)
    if o.proposer != ProposerKind.DRAFTER:
        from .lookup_history import open_lookup

        fp = names["target_vocab"].fingerprint
        paths["history_path"] = state.history_path(target_name, fp, o.profile) if o.use_history else None
        lookup = open_lookup(paths["history_path"], fp, len(names["target_vocab"]), o.history_tokens, log, o.reset)
    if o.adapt is not None:
        adapter, paths["adapter_path"] = _open_adapter(bundle, drafting, drafter_name, target_name, o)
    if o.proposer == ProposerKind.DRAFTER:
        proposer = drafting
    else:
        costs = (None, None)
        if drafting is not None:
            paths["costs_path"] = state.costs_path(target_name, drafter_name, f"{target.backend}-{drafter.backend}")
            costs = _load_costs(paths["costs_path"])
        proposer = hybrid = Hybrid(lookup, drafting, *costs)
    return Pair(SpeculativeDecoder(target, target_vocab, proposer, adapter), **names, draft=draft, drafting=drafting,
                lookup=lookup, hybrid=hybrid, adapter=adapter, **paths)


def _load_costs(path: Path) -> tuple:
    """(costs, drafter rounds) the hybrid measured on this machine in earlier runs, or (None, None): fresh
    (a damaged or implausible file is set aside)."""
    return StateFile("costs file", path, "measuring afresh").open(
        lambda p: measurements(json.loads(p.read_bytes())), lambda: (None, None), log)


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
    check_context(target_path, o.max_context)
    if drafter_path is not None:
        check_context(drafter_path, 2 * o.max_context, "the drafter's context (twice --max-context)")
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
        training_section(bundle, drafter_backend)
        drafter = open_runner(bundle, "drafter", drafter_backend, o.threads, graph="executorch_lora")
    else:
        drafter = open_runner(bundle, "drafter", drafter_backend, o.threads)
    return target, vocabs["target"], names["target"], drafter, vocabs["drafter"], names["drafter"], bundle


def _draft_settings(o: PairOptions, drafter, bundle) -> DraftSettings:
    """GenerationConfig's draft-length fields: 'auto' when the drafter has an acceptance head (else 4 per
    round), capped at 8 or the bundle's exported maximum; explicit values are checked against it."""
    bundle_max = bundle.max_draft_len if bundle is not None else None
    cap = o.max_draft_len if o.max_draft_len is not None else min(8, bundle_max or 8)
    draft_len = o.draft_len
    if draft_len is None:
        draft_len = DraftPolicy.AUTO if drafter is None or drafter.has_head else min(4, cap)
    if draft_len == DraftPolicy.AUTO and drafter is not None and not drafter.has_head:
        raise OmniDraftError(NO_HEAD)
    if bundle is not None:
        bundle.check_draft_len(draft_len if isinstance(draft_len, int) else cap)
    fixed = isinstance(draft_len, int)
    return DraftSettings(DraftPolicy.FIXED if fixed else DraftPolicy(draft_len), draft_len if fixed else 4, cap, o.gamma)


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


def _open_predictor(head, bridge: VocabBridge, drafter_name, target_name, o: PairOptions):
    """The acceptance head's online trainer (for --draft-len auto), resumed from the profile's file."""
    from .adaptation.predictor import AcceptancePredictor

    predictor = AcceptancePredictor(head, o.predictor)
    path = state.head_path(drafter_name, target_name, bridge.pair_id, o.profile)

    def resume(p: Path) -> AcceptancePredictor:
        predictor.load(p)
        return predictor

    return StateFile("acceptance head", path, "starting a fresh head").open(resume, lambda: predictor, log, o.reset), path


def _open_adapter(bundle, drafting: DraftModel, drafter_name: str, target_name: str, o: PairOptions):
    """The drafter's online adapter for the profile (eager LoRA, or the bundle's ExecuTorch training program,
    whose fixed shapes then decide the examples per step and their window, as on the phone)."""
    from .adaptation.online import attach

    config = o.adapt
    if bundle is not None and drafting.drafter is not None:
        training = training_section(bundle, drafting.drafter.backend)
        config = replace(config, batch=int(training["batch"]), window=int(training["window"]))
    learner = learner_for(bundle, drafting, config)
    path = state.adapter_path(drafter_name, target_name, drafting.bridge.pair_id, o.profile)
    meta = {"drafter": drafter_name, "target": target_name}
    try:
        return attach(learner, drafting.bridge, config, path, meta, o.reset, warn=log), path
    except ValueError as e:
        raise OmniDraftError(str(e)) from None


def open_runner(bundle, role: str, backend: Backend, threads: int | None, graph: str | None = None):
    """A runner over the bundle's graph for `role` on `backend` (onnxruntime or executorch).

    graph: another of the role's graphs by its bundle.json key (e.g. "executorch_lora", whose runner
    owns zero LoRA tensors as extra inputs until a learner updates them).
    """
    entry = bundle.model(role)
    meta = entry.to_dict()
    path = bundle.root / entry.graphs[graph] if graph else bundle.graph_path(role, backend)
    if backend == Backend.ONNXRUNTIME:
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


def build_bundle_pair(bundle_dir, backend: Backend, speculative: bool = True, threads: int | None = None,
                      use_ngram_cache: bool = True, **options) -> Pair:
    """open_pair over an exported bundle (the benchmarks' and tests' shorthand)."""
    return open_pair(PairOptions(bundle=Path(bundle_dir), backend=backend, speculative=speculative, threads=threads,
                                 use_ngram_cache=use_ngram_cache, **options))
