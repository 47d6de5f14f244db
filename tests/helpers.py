"""What the tests share besides fixtures: tiny random-init models from real configs, small real
language models behind the runner interface (bigram tables), tiny vocabularies, the exact laws and
the chi-square test for sampling, the CLI run in-process, damaged bundles, and the shared tiny bundle's
sizes. The fixtures themselves are in conftest.py.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import numpy as np
import torch

from omnidraft.runtime.vocab import Vocab

def tiny_model(checkpoint, seed: int, init_std: float = 0.5, sliding_window: int | None = None,
               vocab_size: int | None = None):
    """A 2-layer, 64-wide random model with the checkpoint's real config and vocabulary.

    A large init spreads the logits, so greedy choices are far from ties and the
    greedy-equivalence tests do not hinge on float rounding.
    """
    from transformers import AutoConfig

    config = copy.deepcopy(AutoConfig.from_pretrained(checkpoint))
    config.num_hidden_layers = 2
    config.hidden_size = 64
    config.intermediate_size = 128
    config.num_attention_heads = 2
    config.num_key_value_heads = 1
    config.head_dim = 32
    config.initializer_range = init_std
    if getattr(config, "layer_types", None):
        config.layer_types = ["sliding_attention", "full_attention"]
    if sliding_window is not None:
        config.sliding_window = sliding_window
    if vocab_size is not None:  # a reduced vocabulary, where only the numerics matter (export, quantization)
        config.vocab_size = vocab_size
    return random_model(config, seed)


def write_model_spec(model, out: Path) -> None:
    """A default model's configuration and tokenizer, read from its GGUF without converting a weight (the same
    tokenizer files `omnidraft prepare` writes): what the tiny random models of the fast tier need."""
    from transformers import AutoConfig, AutoTokenizer

    gguf = model.gguf_path()
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(out)
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(out)


def random_model(config, seed: int):
    """A random-init model of `config`, its norm weights spread too, in eval mode."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():  # spread the norms too (Gemma's norm weights start at zero)
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(0.0, 0.5)
    model.eval().requires_grad_(False)
    return model



def bigram_runner(table: np.ndarray, max_context: int = 64):
    """A real (if trivial) language model, a bigram logit table, behind the runner interface."""
    from omnidraft.runtime.runner import ModelRunner, Step

    class Bigram(ModelRunner):
        backend = "bigram"

        def __init__(self):
            super().__init__(table.shape[1], max_context)
            self.name = "bigram"

        def _forward(self, tokens, start, n_logits):
            return Step(table[tokens[-n_logits:]].astype(np.float32))

    return Bigram()


def byte_vocab(size: int) -> Vocab:
    """A vocabulary of `size` single-letter tokens, for tests that need no tokenizer."""
    token_bytes = [bytes([65 + i]) for i in range(size)]
    byte_tokens = [-1] * 256
    for i, b in enumerate(token_bytes):
        byte_tokens[b[0]] = i
    return Vocab(None, token_bytes, np.zeros(size, bool), np.zeros(size, bool), byte_tokens, f"letters{size}")


def letters_vocab(pieces: list[str], merges: list[tuple[str, str]]) -> Vocab:
    """A tiny real BPE tokenizer (HF tokenizers) over a few letters, as a Vocab."""
    from tokenizers import Tokenizer
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(BPE({p: i for i, p in enumerate(pieces)}, merges)))
    token_bytes = [p.encode() for p in pieces]
    byte_tokens = [-1] * 256
    for i, b in enumerate(token_bytes):
        if len(b) == 1:
            byte_tokens[b[0]] = i
    n = len(pieces)
    return Vocab(tokenizer, token_bytes, np.zeros(n, bool), np.zeros(n, bool), byte_tokens, "letters-" + "-".join(pieces))


def letters_cross_pair(target_table: np.ndarray, draft_table: np.ndarray):
    """Bigram target over {A, B, C, AB} and bigram drafter over {A, B, C, BC}: different vocabularies.

    Target "AB" is two draft tokens (an n-gram merge once the cache learns it);
    draft "BC" has no target twin (a split). Small enough to enumerate the law.
    """
    from omnidraft.runtime.decoding import SpeculativeDecoder

    target_vocab = letters_vocab(["A", "B", "C", "AB"], [("A", "B")])
    draft_vocab = letters_vocab(["A", "B", "C", "BC"], [("B", "C")])
    dec = SpeculativeDecoder.with_drafter(bigram_runner(target_table), target_vocab, bigram_runner(draft_table), draft_vocab, ngram_cache=True)
    return dec


def reference_probs(table, temperature: float = 1.0, top_p: float = 1.0) -> np.ndarray:
    """Each row's sampling law the slow, obvious way: softmax(row / T), then a full stable sort for top-p."""
    x = np.asarray(table, dtype=np.float64) / temperature
    probs = np.exp(x - x.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    for row in probs:
        order = np.argsort(-row, kind="stable")
        keep = order[: int(np.searchsorted(np.cumsum(row[order]), top_p)) + 1]
        cut = np.zeros_like(row)
        cut[keep] = row[keep]
        row[:] = cut / cut.sum()
    return probs


def exact_distribution(table, prompt_token, n, temperature: float = 1.0, top_p: float = 1.0):
    """P(sequence) of n tokens sampled from a bigram table, by enumeration."""
    import itertools

    probs = reference_probs(table, temperature, top_p)
    v = table.shape[0]
    dist = {}
    for seq in itertools.product(range(v), repeat=n):
        p, prev = 1.0, prompt_token
        for t in seq:
            p *= probs[prev, t]
            prev = t
        dist[seq] = p
    return dist


def sample_law(dec, prompt, n: int, runs: int, temperature: float = 1.0, top_p: float = 1.0,
               **config) -> tuple[dict, dict]:
    """Empirical law of n-token outputs over `runs` seeds, with acceptance and n-gram proposal counts."""
    from omnidraft.runtime.decoding import GenerationConfig
    from omnidraft.runtime.sampling import Sampler

    counts, totals = {}, {"accepted": 0, "drafted": 0, "ngram_cache_hits": 0}
    for seed in range(runs):
        got = dec.generate(prompt, GenerationConfig(max_new_tokens=n, sampler=Sampler(temperature, top_p), seed=seed,
                                                    **config))
        key = tuple(got.token_ids)
        counts[key] = counts.get(key, 0) + 1
        totals["accepted"] += got.stats.accepted
        totals["drafted"] += got.stats.drafted
        totals["ngram_cache_hits"] += got.stats.drafter.ngram_hits
    totals["acceptance"] = totals["accepted"] / max(totals["drafted"], 1)
    return counts, totals


def chi_square_p(counts: dict, law: dict, runs: int) -> float:
    """Goodness of fit of observed outcome counts to an exact law (rare outcomes pooled to >= 5 expected)."""
    keys = sorted(law)
    expected = np.array([law[k] * runs for k in keys])
    observed = np.array([counts.get(k, 0) for k in keys])
    assert observed.sum() == runs  # no outcome outside the law's support
    exp_cells, obs_cells, e_acc, o_acc = [], [], 0.0, 0
    for i in np.argsort(expected):
        e_acc += expected[i]
        o_acc += observed[i]
        if e_acc >= 5:
            exp_cells.append(e_acc)
            obs_cells.append(o_acc)
            e_acc, o_acc = 0.0, 0
    exp_cells[-1] += e_acc
    obs_cells[-1] += o_acc
    from scipy import stats

    return stats.chisquare(obs_cells, exp_cells)[1]



@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args, home=None, stdin: str | None = None) -> Ran:
    """`omnidraft ARGS` in this process (as `python -m omnidraft` runs it, without the interpreter start-up)."""
    from omnidraft.cli import main

    out, err = io.StringIO(), io.StringIO()
    env = {"OMNIDRAFT_HOME": str(home)} if home is not None else {}
    with mock.patch.dict(os.environ, env), mock.patch("sys.stdin", io.StringIO(stdin or "")), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return Ran(code, out.getvalue(), err.getvalue())


def damaged_copy(bundle_dir, tmp_path, damage):
    """A copy of a bundle with `damage(root)` applied to it (the original stays intact)."""
    dst = tmp_path / "b"
    shutil.copytree(bundle_dir, dst)
    damage(dst)
    return dst


def edit_manifest(fn):
    """A damage that edits bundle.json in place through fn(manifest)."""
    def damage(root):
        m = json.loads((root / "bundle.json").read_text())
        fn(m)
        (root / "bundle.json").write_text(json.dumps(m))
    return damage


WITHOUT_TRAINING = edit_manifest(lambda m: m.pop("training"))


# -- one tiny exported bundle shared by the export, training-graph and simulator tests ---------
# Subprocess timeouts guard against a hang, not against a slow machine: the suite must pass on a
# machine busy with other work (several times slower than idle), so no test asserts a duration.
HANG_GUARD_SECONDS = 3600
TINY_MAX_DRAFT = 4
TINY_WINDOW = 48
TINY_HEAD_TOKENS = 4096  # the tiny drafter's draft head (tiny_checkpoints)


def tiny_lora():
    from omnidraft.adaptation.lora import LoRAConfig

    return LoRAConfig(rank=4, alpha=8.0, targets=("q_proj", "v_proj", "down_proj"))


def shared_dir(tmp_path_factory, worker_id: str, name: str, build) -> Path:
    """A folder built once per test run and shared by its xdist workers: whichever worker asks
    first builds it (under a lock), the others wait and reuse it. Read-only for the tests."""
    from omnidraft.state import locked

    base = tmp_path_factory.getbasetemp()
    root = base.parent if worker_id != "master" else base  # the run's folder, above the workers' own
    out, done = root / name, root / f"{name}.complete"
    with locked(out):
        if not done.exists():
            shutil.rmtree(out, ignore_errors=True)
            build(out)
            done.touch()
    return out


def write_tiny_gguf(path: Path, model, tokenizer_gguf: Path, architecture: str = "llama") -> Path:
    """A llama-architecture GGUF file (llama.cpp's layout, F32 tensors) of a small HF llama `model`, with the
    tokenizer fields of a real GGUF (`tokenizer_gguf`): what a user's converted model file holds."""
    from gguf import GGUFReader, GGUFValueType, GGUFWriter

    c = model.config
    w = GGUFWriter(str(path), architecture)
    for key, value in (("block_count", c.num_hidden_layers), ("context_length", c.max_position_embeddings),
                       ("embedding_length", c.hidden_size), ("feed_forward_length", c.intermediate_size),
                       ("attention.head_count", c.num_attention_heads),
                       ("attention.head_count_kv", c.num_key_value_heads), ("vocab_size", c.vocab_size),
                       ("rope.dimension_count", c.hidden_size // c.num_attention_heads)):
        w.add_key_value(f"{architecture}.{key}", int(value), GGUFValueType.UINT32)
    w.add_key_value(f"{architecture}.rope.freq_base", float(c.rope_parameters["rope_theta"]), GGUFValueType.FLOAT32)
    w.add_key_value(f"{architecture}.attention.layer_norm_rms_epsilon", float(c.rms_norm_eps), GGUFValueType.FLOAT32)
    for key, field in GGUFReader(tokenizer_gguf).fields.items():
        if key.startswith("tokenizer."):
            array = field.types[0] == GGUFValueType.ARRAY
            w.add_key_value(key, field.contents(), field.types[0], field.types[-1] if array else None)

    def rope_order(t, heads):  # llama.cpp stores q and k with each head's two rotary halves interleaved
        return t.reshape(heads, 2, t.shape[0] // heads // 2, *t.shape[1:]).swapaxes(1, 2).reshape(t.shape)

    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    if not c.tie_word_embeddings:
        w.add_tensor("output.weight", sd["lm_head.weight"])
    names = {"input_layernorm": "attn_norm", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        w.add_tensor(f"blk.{i}.attn_q.weight", rope_order(sd[p + "self_attn.q_proj.weight"], c.num_attention_heads))
        w.add_tensor(f"blk.{i}.attn_k.weight", rope_order(sd[p + "self_attn.k_proj.weight"], c.num_key_value_heads))
        for hf, gg in names.items():
            w.add_tensor(f"blk.{i}.{gg}.weight", sd[p + hf + ".weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
