"""Golden vectors from the Python reference, replayed by the Java core's tests (android_demo/core).

    python tools/golden.py --out DIR

writes DIR/tokenizers.json (both default tokenizers: fingerprints, encode and
byte spellings of varied text), DIR/ngram_cache.json (a sequence of cache
operations and what each returned), DIR/bridge.json (draft runs of the real
pair turned into target proposals through a learned cache) and DIR/verify.json
(greedy and sampling decisions from given logits and given uniform draws),
DIR/training.json (a LoRA training example and its padded window) and
DIR/lookup.json (lookup's history index, continuations, scorer and prefix choice),
DIR/manifest.json (a current bundle.json as export writes it, and damaged copies with the field
the Python loader names), DIR/policy.json (the policy section bundles carry: the runtime's constants),
DIR/round_trace.json (the hybrid deciding every round on small runners with pinned costs) and
DIR/families.json (the GPT-2, Llama-3, Qwen2, Phi-3 and cl100k tokenizers and their bridge from the
default drafter, prepared on first use: omnidraft/tokenizer_families.py). Test tooling, not part of the
package: run from the repository's root. The Java side must match
every value exactly.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from omnidraft.atomic import write_bytes_atomic
from omnidraft.models import DEFAULT_DRAFTER, DEFAULT_TARGET, load_tokenizer
from omnidraft.catalog import resolve_model_path
from omnidraft.export.policy import policy
from omnidraft.runtime.bridge import VocabBridge
from omnidraft.runtime.ngram_cache import NGramCache
from omnidraft.runtime.sampling import Sampler
from omnidraft.runtime.verify import verify
from omnidraft.runtime.vocab import Vocab

TEXTS = [
    "Hello, world!",
    "def add(a, b):\n    return a + b\n",
    "Crème brûlée, naïve café, Ærøskøbing, İstanbul",
    "中文测试：你好，世界。日本語のテキスト、한국어",
    "emoji 🍵🚀👩‍💻 and flags 🇫🇷",
    "tabs\tand   many     spaces\n\n\n\nnewlines   \n  ",
    "<start_of_turn>user\nhi<end_of_turn>\n<|im_start|>assistant",
    "numbers 1234567890 3.14159 -42 1e-9",
    "control \u0001\u0007 chars \u00a0 nbsp \u2028 sep",
    "    indented code:\n\tif (x != y) { return x->y; }",
    "I'm sure they'll say it's John's and we've done it",
    "",
]
INVALID_BYTES = [b"cut \xe4\xb8", b"\xff\xfe bad start", b"mid \xc3( bad", b"\xe2\x82\xac ok then \xf0\x9f"]


class Uniforms:
    """An rng stand-in that hands out given uniform draws and records how many were used."""

    def __init__(self, values):
        self.values = list(values)
        self.used = 0

    def random(self):
        v = self.values[self.used]
        self.used += 1
        return v


def tokenizer_vectors(vocabs: dict) -> dict:
    return {role: vocab_vectors(v) for role, v in vocabs.items()}


def vocab_vectors(v: Vocab, texts: list[str] = TEXTS) -> dict:
    cases = []
    for text in texts:
        ids = v.tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)
        cases.append({"text": text, "ids": ids, "bytes_hex": v.decode_bytes(ids).hex(),
                      "spelled": v.encode_bytes(text.encode("utf-8"), lenient=True)})
    for data in INVALID_BYTES:
        cases.append({"bytes_in_hex": data.hex(), "spelled": v.encode_bytes(data, lenient=True)})
    return {"fingerprint": v.fingerprint, "size": len(v), "cases": cases, "byte_tokens": list(v.byte_tokens)}


def family_vectors(drafter: Vocab) -> dict:
    """Per tokenizer family (tokenizer_families.py): its tokenizer vectors on TEXTS and llama.cpp's
    test texts, and the bridge from the default drafter (bridge_vectors with that family as target)."""
    from omnidraft.tokenizer_families import ground_truth, prepare_families

    out = {}
    for family, path in prepare_families().items():
        v = Vocab.from_tokenizer(load_tokenizer(path))
        out[family] = {"tokenizer": vocab_vectors(v, TEXTS + [t for t, _ in ground_truth(path)]),
                       "bridge": bridge_vectors({"drafter": drafter, "target": v})}
    return out


def cache_vectors(rng) -> dict:
    cache = NGramCache("golden", max_entries=20, max_ngram=4)
    ops = []
    for step in range(120):
        kind = rng.choice(["add", "add", "lookup", "record"])
        ngram = [int(x) for x in rng.integers(0, 6, size=int(rng.integers(1, 6)))]
        if kind == "add":
            target = int(rng.integers(100, 110))
            cache.add(target, ngram)
            ops.append({"op": "add", "target": target, "ngram": ngram, "size": len(cache)})
        elif kind == "lookup":
            start = int(rng.integers(0, len(ngram)))
            hit = cache.lookup(ngram, start)
            ops.append({"op": "lookup", "draft": ngram, "start": start, "hit": list(hit) if hit else None})
        else:
            cache.record_accepted(ngram)
            ops.append({"op": "record", "ngram": ngram})
    final = [[list(k), t, c] for k, t, c in cache.items()]
    return {"max_entries": 20, "max_ngram": 4, "ops": ops, "final": final}


def bridge_vectors(vocabs: dict) -> dict:
    bridge = VocabBridge(vocabs["drafter"], vocabs["target"])
    cache = NGramCache(bridge.pair_id)
    for text in TEXTS[:6]:
        bridge.learn(cache, vocabs["target"].encode_bytes(text.encode("utf-8"), lenient=True))
    cases = []
    for text in TEXTS:
        draft = vocabs["drafter"].encode_bytes(text.encode("utf-8"), lenient=True)
        for use_cache in (True, False):
            prop = bridge.propose(draft, np.linspace(0.9, 0.1, len(draft)) if draft else np.zeros(0),
                                  cache if use_cache else None, max_tokens=12)
            cases.append({"draft": draft, "use_cache": use_cache, "target_ids": prop.target_ids, "q": prop.q,
                          "kind": prop.kind, "draft_start": prop.draft_start, "draft_end": prop.draft_end})
    direct = np.nonzero(bridge.draft_to_target >= 0)[0]
    return {"pair_id": bridge.pair_id, "cache_file": cache.to_json(), "intersection": bridge.intersection_size, "direct_sample": [[int(d), int(bridge.draft_to_target[d])]
                                                                          for d in direct[:: max(1, len(direct) // 200)]],
            "cache": [[list(k), t, c] for k, t, c in cache.items()], "cases": cases}


def verify_vectors(rng) -> dict:
    """Same-vocabulary proposals over a small vocabulary (the bridge is the identity)."""
    vocab = 32
    small = Vocab(None, [bytes([65 + i % 26]) * (1 + i // 26) for i in range(vocab)], np.zeros(vocab, bool),
                  np.zeros(vocab, bool), [-1] * 256, "golden")
    bridge = VocabBridge(small, small)
    cases = []
    for temperature, top_p in ((0.0, 1.0), (1.0, 1.0), (0.7, 0.9)):
        sampler = Sampler(temperature, top_p)
        for _ in range(12):
            m = int(rng.integers(0, 5))
            draft_logits = rng.normal(size=(m, vocab)) * 2
            target_logits = rng.normal(size=(m + 1, vocab)) * 2
            if sampler.greedy:  # make some proposals the target's own choice
                draft = [int(np.argmax(target_logits[j])) if rng.random() < 0.6 else int(rng.integers(vocab))
                         for j in range(m)]
                dists, q = [None] * m, [1.0] * m
            elif rng.random() < 0.5:  # the default under sampling: point masses, checked against each draw
                draft = [int(np.argmax(row)) for row in draft_logits]
                dists, q = None, [1.0] * m
            else:  # sampled drafts (rejection sampling)
                dists = [sampler.probs(row) for row in draft_logits]
                draft = [int(rng.choice(vocab, p=d)) for d in dists]
                q = [float(d[t]) for d, t in zip(dists, draft)]
            prop = bridge.proposal(bridge.propose(draft, np.array(q), None, max_tokens=m),
                                   None if sampler.greedy else dists)
            uniforms = Uniforms(rng.random(m + 2))
            seed, start = int(rng.integers(1 << 40)), int(rng.integers(1000))
            n, nxt = verify(prop, target_logits.astype(np.float32), sampler, uniforms, seed, start)
            cases.append({"temperature": temperature, "top_p": top_p, "draft": draft, "seed": seed, "start": start,
                          "sampled_drafts": dists is not None,
                          "draft_logits": draft_logits.tolist(), "target_logits": target_logits.astype(np.float32).tolist(),
                          "uniforms": uniforms.values, "accepted": n, "next": nxt, "uniforms_used": uniforms.used})
    return {"vocab": vocab, "cases": cases}


def synthetic_rows(n: int, vocab: int) -> np.ndarray:
    """Target logits both sides can compute: sin(0.37 j + 0.0011 v) in float64, stored as float32."""
    j, v = np.meshgrid(np.arange(n), np.arange(vocab), indexing="ij")
    return np.sin(0.37 * j + 0.0011 * v).astype(np.float32)


def training_vectors(vocabs: dict, window: int = 48) -> dict:
    """A LoRA training example from committed tokens (KL and NLL units) and its padded window."""
    from omnidraft.adaptation.examples import ExampleBuilder, Mapping, unit_hits

    bridge = VocabBridge(vocabs["drafter"], vocabs["target"])
    mapping = Mapping.from_bridge(bridge)
    prompt = vocabs["drafter"].encode_bytes("def add(a, b):".encode(), lenient=True)
    committed = vocabs["target"].encode_bytes(" return a + b  # café 中文 🍵 flakes".encode(), lenient=True)
    rows = synthetic_rows(len(committed), len(vocabs["target"]))
    builder = ExampleBuilder(bridge, mapping, prompt)
    builder.add(committed, rows)
    example = builder.build()
    ids, kl_rows, kl_target, kl_weight, nll_rows, nll_labels, nll_weight = example.padded(window, len(mapping))
    # the adapter's guard: a held-out example's last tokens, and a drafter's greedy choices scored on its units
    held = example.window(len(example) - 9)  # cuts the first units off
    choice = np.append(held.ids[1:], 0)
    choice[np.arange(len(choice)) % 7 == 3] += 1  # some choices wrong: some units missed
    guard = {"window": len(held), "units": [list(u) for u in held.units], "choice": choice.tolist(),
             "hits": unit_hits(held, choice)}
    assert 0 < guard["hits"] < len(held.units)
    taught = example.with_prompt_nll().padded(window, len(mapping))
    prompt_nll = {"nll_rows": taught[4].tolist(), "nll_labels": taught[5].tolist(), "nll_weight": taught[6].tolist()}
    return {"units": [list(u) for u in example.units], "guard": guard, "prompt_nll": prompt_nll,
            "schedule": schedule_vectors(), "prompt": prompt, "committed": committed, "window": window, "mapped": len(mapping),
            "example_ids": example.ids.tolist(), "kl_pos": example.kl_pos.tolist(), "nll_pos": example.nll_pos.tolist(),
            "ids": ids.tolist(), "kl_rows": kl_rows.tolist(), "kl_weight": kl_weight.tolist(),
            "nll_rows": nll_rows.tolist(), "nll_labels": nll_labels.tolist(), "nll_weight": nll_weight.tolist(),
            "kl_target_head": kl_target[:, :8].tolist(), "kl_target_sum": float(kl_target.astype(np.float64).sum())}


def schedule_vectors() -> dict:
    """The adapter's defaults and the pure parts of its schedule: replay batches, the guard's verdict, warm-up."""
    from omnidraft.adaptation.online import AdaptConfig, guard_keeps, replay_batches
    from omnidraft.adaptation.update_rule import RULE

    c = AdaptConfig()
    defaults = {k: getattr(c, k) for k in ("every", "holdout_every", "holdout", "buffer", "steps", "replay", "warmup",
                                           "lr", "guard_margin", "prompt_nll", "guard_base")}
    batches = [{"args": [n, b, st, r], "batches": replay_batches(n, b, st, r)}
               for n, b, st, r in ((6, 2, 5, 4), (3, 2, 3, 16), (1, 2, 2, 16), (16, 2, 8, 16), (20, 3, 9, 16))]
    guards = [{"args": [a, f, u, m], "keeps": guard_keeps(a, f, u, m)}
              for a, f, u, m in ((0.30, 0.31, 200, 1.0), (0.25, 0.31, 200, 1.0), (0.31, 0.30, 200, 1.0),
                                 (0.28, 0.31, 50, 1.0), (0.28, 0.31, 5000, 1.0), (0.2, 0.0, 10, 1.0))]
    lrs = [{"args": [lr, done, w], "lr": RULE.lr_at(lr, done, w)} for lr, done, w in ((1e-3, 0, 16), (1e-3, 7, 16),
                                                                                      (1e-3, 40, 16), (3e-4, 0, 1))]
    return {"defaults": defaults, "batches": batches, "guards": guards, "lrs": lrs}


def manifest_vectors(vocabs: dict) -> dict:
    """A bundle.json of the current version (with a training program), checked by the Python loader, and
    damaged copies: each with the field the loader's error names (the app's reader must name it too)."""
    import copy

    from omnidraft.adaptation.examples import Mapping
    from omnidraft.adaptation.update_rule import RULE
    from omnidraft.bundle import VERSION, Manifest, ManifestError, ModelEntry, read_manifest

    def entry(role, vocab, layers, graphs, **extra):
        return ModelEntry(f"tiny-{role}", len(vocab), 64, 5, [layers, 1, 1, 64, 16], f"tokenizers/{role}",
                          vocab.fingerprint, graphs, executorch_ops=["llama"], **extra)

    drafter_graphs = {"executorch": "drafter.pte", "executorch_train": "drafter_train.pte",
                      "executorch_lora": "drafter_lora.pte"}
    models = {"target": entry("target", vocabs["target"], 2, {"executorch": "target.pte"}),
              "drafter": entry("drafter", vocabs["drafter"], 2, drafter_graphs,
                               acceptance_head={"features": 67, "inputs": ["head_weight", "head_bias"],
                                                "outputs": ["head_features", "accept_prob"]})}
    rels = ["target.pte", *drafter_graphs.values(), "tokenizers/target/tokenizer.json",
            "tokenizers/drafter/tokenizer.json", "ngram_cache.json"]
    files = {rel: {"size": 1000 + i, "sha256": f"{i:064x}"} for i, rel in enumerate(rels)}
    lora = [[f"model.layers.{i}.self_attn.q_proj.lora_{ab}", [4, 64] if ab == "A" else [64, 4]]
            for i in range(2) for ab in "AB"]
    bridge = VocabBridge(vocabs["drafter"], vocabs["target"])
    mapped = len(Mapping.from_bridge(bridge))
    training = {"window": 64, "batch": 2, "lam": 0.2, "mapped": mapped, "update": RULE.to_dict(),
                "kernels": "portable", "lora": {"rank": 4, "alpha": 8.0, "targets": ["q_proj"]}, "lora_inputs": lora}
    good = Manifest(64, 4, "none", bridge.pair_id, models, files,
                    eos_ids=[1, 106], chat_eos_ids=[106], ngram_cache="ngram_cache.json", training=training,
                    created="2026-12-05", policy=policy()).to_dict()
    assert good["version"] == VERSION
    read_manifest(good, Path("bundle.json"))

    def damaged(fn):
        m = copy.deepcopy(good)
        fn(m)
        try:
            read_manifest(m, Path("bundle.json"))
        except ManifestError as e:
            return {"manifest": json.dumps(m, indent=1), "field": e.field}
        raise AssertionError("a damaged manifest was accepted")

    plain = copy.deepcopy(good)  # exported without --with-training
    plain["training"] = None
    for key in ("executorch_train", "executorch_lora"):
        del plain["models"]["drafter"]["graphs"][key]
    read_manifest(plain, Path("bundle.json"))

    damages = [
        lambda m: m.update(format="something-else"),
        lambda m: m.update(version=VERSION + 1),
        lambda m: m["models"]["target"].pop("tokenizer_fingerprint"),
        lambda m: m["models"]["drafter"].update(vocab_size=0),
        lambda m: m["models"]["drafter"]["graphs"].update(executorch="../outside.pte"),
        lambda m: m["files"].pop("drafter_lora.pte"),
        lambda m: m["files"]["target.pte"].update(size=-1),
        lambda m: m.update(max_draft_len=0),
        lambda m: m["training"].update(batch=0),
        lambda m: m["training"]["update"].update(optimizer="sgd"),
        lambda m: m["training"].update(lora_inputs=[["x", [0, 4]]]),
        lambda m: m["models"]["drafter"]["graphs"].pop("executorch_lora"),
        lambda m: m.update(chat_eos_ids=[len(vocabs["target"])]),
        lambda m: m.update(ngram_cache="not_listed.json"),
        lambda m: m["models"]["drafter"]["acceptance_head"].update(features=1),
        lambda m: m["policy"].pop("hybrid"),
        lambda m: m["policy"]["hybrid"].update(explore_share=1.5),
        lambda m: m["policy"]["drafting"].update(catchup_window=0),
        lambda m: m["policy"]["lookup"].update(scorer_prior=[0.0] * 5),
        lambda m: m["policy"]["adaptation"].update(lr="0.001"),
    ]
    return {"version": VERSION, "manifest": json.dumps(good, indent=1), "without_training": json.dumps(plain, indent=1),
            "damaged": [damaged(fn) for fn in damages]}


LOOKUP_DOCS = [
    "id,user,city\n1,ana,paris\n2,ben,rome\n3,chen,oslo\n",
    "def area(r):\n    return 3.14159 * r * r\n\ndef perimeter(r):\n    return 2 * 3.14159 * r\n",
    "Dear Ana,\n\nThank you for your order. It has shipped.\n\nBest regards,\nThe shop",
    " And a second turn of the same chat, café 中文.",
    "Dear Ben,\n\nThank you for your order. It will ship soon.\n\nBest regards,\nThe shop",
    "4,dara,lima\n5,eli,kyiv\n6,fatima,cairo\n",
]
LOOKUP_QUERIES = [
    "Dear Chen,\n\nThank you for your",
    "id,user,city\n1,ana,paris\n2,",
    "def volume(r):\n    return 3.14159 *",
    "x = 1\ny = 2\nx = 1\ny =",
    "nothing here matches ζ",
    "The shop",
]


def lookup_vectors(vocabs: dict) -> dict:
    """The lookup index, walk, scorer and hybrid prefix choice on the real target tokenizer's ids."""
    from omnidraft.runtime.hybrid import options
    from omnidraft.runtime.lookup import HistoryIndex, find_candidates
    from omnidraft.runtime.lookup_proposer import LookupScorer

    tv = vocabs["target"]
    enc = lambda text: tv.encode_bytes(text.encode(), lenient=True)  # noqa: E731
    history = HistoryIndex(max_tokens=90)  # small: the oldest documents are dropped along the way
    ops = []
    for i, text in enumerate(LOOKUP_DOCS):
        extend = i == 3  # a chat's next turn
        history.add(enc(text), extend_last=extend)
        ops.append({"tokens": enc(text), "extend": extend, "kept": [d.tokens.tolist() for d in history.docs]})
    scorer = LookupScorer()
    queries = []
    for text in LOOKUP_QUERIES:
        seq = enc(text)
        for budget, hist in ((1, True), (4, True), (16, True), (16, False)):
            c = find_candidates(seq, history if hist else None, budget)
            case = {"seq": seq, "budget": budget, "history": hist, "tokens": c.tokens, "frequency": c.frequency,
                    "support": c.support, "match": c.match, "source": c.source}
            if len(c):
                x = scorer.features(c)
                case["probs"] = scorer.probs(x).tolist()
                labels = [float(j % 3 != 2) for j in range(len(c))]
                scorer.learn(x, np.array(labels))
                case["labels"], case["weights_after"] = labels, scorer.weights.tolist()
                case["offset_after"] = scorer.offset
                value, choice, m = max(options(np.array(case["probs"]), lambda n: 0.05 + 0.011 * (n - 1), None, 0),
                                       key=lambda o: o[0])
                case["best_prefix"] = {"a": 0.05, "b": 0.011, "value": value, "m": m}
            if len(queries) % 8 == 7:
                scorer.begin()  # a new generation: its own correction starts afresh
                case["begin_after"] = True
            queries.append(case)
    return {"max_tokens": 90, "ops": ops, "queries": queries}


def hybrid_vectors(rng: np.random.Generator) -> dict:
    """The hybrid's pieces: the target cost fit, the drafter's running figures, and each round's choice."""
    from omnidraft.runtime.hybrid import CARRY, EXPLORE_SHARE, CallCosts, DrafterRounds, options

    costs = CallCosts()
    fits = []
    for n, s in [(1, 0.013), (3, 0.017), (1, 0.0125), (2, 0.0152), (9, 0.031), (1, 0.014), (5, 0.02)]:
        costs.observe_target(n, s)
        fits.append({"n": n, "seconds": s, "T1": costs.target(1), "T4": costs.target(4), "T12": costs.target(12)})
    rounds = DrafterRounds()
    seq = []
    for accepted, proposed, calls in [(0, 3, 3), (1, 1, 1), (2, 2, 2), (0, 1, 1), (4, 5, 5)]:
        rounds.add(accepted, proposed, calls)
        seq.append({"add": [accepted, proposed, calls], "means": list(rounds.means())})
    carried = rounds.carried()
    cases = []
    for i in range(32):
        probs = np.round(rng.uniform(0.05, 0.98, size=int(rng.integers(0, 7))), 3)
        a, b = float(rng.uniform(0.01, 0.1)), float(rng.uniform(0.0, 0.02))
        drafter = None if i % 5 == 0 else (float(rng.uniform(0, 2)), float(rng.uniform(1, 4)), float(rng.uniform(1, 4)),
                                           float(rng.uniform(0.001, 0.03)))
        budget = int(rng.integers(1, 10))
        if i >= 24:  # verification and drafting nearly free, lookup unsure: where chains win
            probs, b = np.round(rng.uniform(0.3, 0.8, size=int(rng.integers(1, 4))), 3), float(rng.uniform(0, 5e-4))
            drafter, budget = (float(rng.uniform(0.5, 1.5)), 2.0, 2.0, 0.0005), 8
        value, choice, m = max(options(probs, lambda n, a=a, b=b: a + b * (n - 1), drafter, budget),
                               key=lambda o: o[0])
        cases.append({"probs": probs.tolist(), "a": a, "b": b, "drafter": drafter, "budget": budget,
                      "value": value, "choice": choice, "m": m})
    return {"fits": fits, "rounds": seq, "carried": carried.values(), "explore_share": EXPLORE_SHARE, "carry": CARRY,
            "cases": cases}


def java_bigram_row(last: int, vocab: int, seed: int, boost) -> np.ndarray:
    """The Java tests' small deterministic model (LoopTest.Bigram), bit for bit: a hash of (last, v, seed) per
    logit in 64-bit wrapping arithmetic, and 100 on the favoured token after `last` when boost has one."""
    mask = (1 << 64) - 1
    v = np.arange(vocab, dtype=np.uint64)
    h = np.uint64(last * 0x9E3779B97F4A7C15 & mask) ^ (v * np.uint64(0xC2B2AE3D27D4EB4F)) ^ np.uint64(seed & mask)
    h ^= h >> np.uint64(31)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(29)
    row = (h & np.uint64(0xFFFF)).astype(np.float32) / np.float32(6553.6)
    if boost is not None and last < len(boost) and boost[last] >= 0:
        row[boost[last]] = 100.0
    return row


def round_trace_vectors(vocabs: dict) -> dict:
    """The hybrid deciding whole rounds on small runners with pinned costs: per round, the lookup prefix and
    drafter tokens proposed, the accepted count and the target's token (the Java core replays it exactly).
    The target follows a short cycle of tokens that have draft twins (lookup's ground); the drafter knows
    the cycle for two draft tokens in three."""
    from omnidraft.runtime.decoding import GenerationConfig, SpeculativeDecoder
    from omnidraft.runtime.drafting import DraftModel
    from omnidraft.runtime.hybrid import CallCosts, Hybrid
    from omnidraft.runtime.lookup_proposer import LOOKUP, LookupProposer
    from omnidraft.runtime.runner import ModelRunner, Step

    class Bigram(ModelRunner):
        def __init__(self, vocab, context, seed, boost):
            super().__init__(vocab, context)
            self.seed, self.boost = seed, boost

        def _forward(self, tokens, start, n_logits):
            return Step(np.stack([java_bigram_row(int(t), self.vocab_size, self.seed, self.boost)
                                  for t in tokens[-n_logits:]]))

    class Recorder:  # the hybrid, each round written down
        def __init__(self, inner):
            self.inner, self.rounds = inner, []

        def begin(self, seq, config, rng, learn=True):
            self.inner.begin(seq, config, rng, learn)

        def propose(self, seq, budget, after=None):
            return self.inner.propose(seq, budget, after)

        def observe(self, seq, rnd):
            lookup = 0
            while lookup < len(rnd.proposal) and rnd.proposal.sources[lookup] == LOOKUP:
                lookup += 1
            self.rounds.append([lookup, len(rnd.proposal) - lookup, rnd.accepted, rnd.next_token])
            self.inner.observe(seq, rnd)

        def end(self, weights_changed=False, remember=True):
            return self.inner.end(weights_changed, remember)

    dv, tv = vocabs["drafter"], vocabs["target"]
    bridge = VocabBridge(dv, tv)
    twins = [t for t in bridge.draft_to_target.tolist() if t >= 0]
    cycle = [twins[(i * 7919) % len(twins)] for i in range(11)]
    favourite = [cycle[(t * 31) % len(cycle)] for t in range(len(tv))]
    for i, t in enumerate(cycle):
        favourite[t] = cycle[(i + 1) % len(cycle)]
    target_to_draft = {t: d for d, t in enumerate(bridge.draft_to_target.tolist()) if t >= 0}
    boost = [target_to_draft.get(favourite[t], -1) if t >= 0 and d % 3 else -1
             for d, t in enumerate(bridge.draft_to_target.tolist())]
    prompts = [[2, *tv.tokenizer.encode(text, add_special_tokens=False)]
               for text in ("one two three one two three one two", "def add(a, b):")]
    runs = []
    for costs in ((1.0, 0.01, 0.05), (1.0, 0.0005, 0.001)):
        target = Bigram(len(tv), 256, 1, favourite)
        drafting = DraftModel.between(target, tv, Bigram(len(dv), 512, 7, boost), dv, ngram_cache=True)
        recorder = Recorder(Hybrid(LookupProposer(None), drafting, CallCosts(fixed=costs)))
        decoder = SpeculativeDecoder(target, tv, recorder)
        for prompt in prompts:
            recorder.rounds = []
            result = decoder.generate(prompt, GenerationConfig(max_new_tokens=40, draft_len=3))
            runs.append({"costs": list(costs), "prompt": prompt, "tokens": result.token_ids, "sources": result.sources,
                         "rounds": recorder.rounds})
    return {"draft_prefix": list(dv.tokenizer.encode("", add_special_tokens=True)), "favourite": favourite,
            "boost": boost, "target_vocab": len(tv), "drafter_vocab": len(dv), "runs": runs}


def write_all(out: Path) -> None:
    vocabs = {role: Vocab.from_tokenizer(load_tokenizer(resolve_model_path(None, default)))
              for role, default in (("drafter", DEFAULT_DRAFTER), ("target", DEFAULT_TARGET))}
    rng = np.random.default_rng(0)
    files = {"tokenizers.json": tokenizer_vectors(vocabs), "ngram_cache.json": cache_vectors(rng),
             "bridge.json": bridge_vectors(vocabs), "verify.json": verify_vectors(rng),
             "training.json": training_vectors(vocabs), "lookup.json": lookup_vectors(vocabs), "hybrid.json": hybrid_vectors(rng), "manifest.json": manifest_vectors(vocabs),
             "policy.json": policy(), "round_trace.json": round_trace_vectors(vocabs),
             "families.json": family_vectors(vocabs["drafter"])}
    for name, data in files.items():
        write_bytes_atomic(Path(out) / name, json.dumps(data, ensure_ascii=False).encode("utf-8"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    write_all(ap.parse_args().out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
