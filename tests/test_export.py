"""Exported graphs (onnxruntime, ExecuTorch) behind the runner interface, and the bundle contract.

Tiny random models with the real configs and tokenizers are exported for real;
their logits must match eager torch, greedy speculative decoding on each backend
must equal target-only decoding on the same backend, and a damaged bundle must be
refused with one clear error.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from omnidraft.bundle import load_bundle
from omnidraft.errors import OmniDraftError
from omnidraft.export.policy import policy
from omnidraft.pair import build_bundle_pair, open_runner
from omnidraft.runtime.decoding import GenerationConfig, SpeculativeDecoder
from omnidraft.runtime.runner import EagerRunner

from .helpers import TINY_HEAD_TOKENS, TINY_MAX_DRAFT, WITHOUT_TRAINING, damaged_copy, edit_manifest, run_cli, tiny_model

pytestmark = pytest.mark.slow  # exports (make test runs it; make test-fast does not)

MAX_DRAFT = TINY_MAX_DRAFT
BACKENDS = ["onnxruntime", "executorch"]


@pytest.fixture
def bundle_dir(tiny_bundle):
    """The shared tiny bundle (conftest.py): ONNX and ExecuTorch graphs, training programs too."""
    return tiny_bundle


def test_bundle_manifest(bundle_dir):
    from omnidraft.bundle import Manifest

    m = json.loads((bundle_dir / "bundle.json").read_text())
    b = load_bundle(bundle_dir)
    assert b.manifest == Manifest.parse(m) and b.manifest.to_dict() == m  # one typed record, written and read
    assert b.model("drafter").acceptance_head["features"] == 64 + 2 and b.model("target").executorch_ops == ["llama"]
    assert m["format"] == "omnidraft-bundle" and m["version"] == 5
    target = m["models"]["target"]  # version 5: a prefill chunk a call, logits of the rows asked for, a ring
    assert target["max_tokens_per_call"] == 16 and target["max_logit_rows"] == 16
    assert target["cache_lengths"] == [8 + 16, 64] and "cache_lengths" not in m["models"]["drafter"]
    assert all(m["models"][r]["executorch_ops"] == ["llama"] for r in ("target", "drafter"))  # the lean graphs
    assert m["models"]["drafter"]["acceptance_head"]["features"] == 64 + 2  # tiny hidden size + confidence
    assert "acceptance_head" not in m["models"]["target"]
    assert m["max_draft_len"] == MAX_DRAFT and m["quant"] == "none"
    assert m["models"]["target"]["vocab_size"] == 262144 and m["models"]["drafter"]["vocab_size"] == 49152
    assert set(m["models"]["target"]["graphs"]) == {"onnx", "executorch"}
    for rel, entry in m["files"].items():
        assert (bundle_dir / rel).stat().st_size == entry["size"] and len(entry["sha256"]) == 64
    assert any(rel.startswith("tokenizers/target/") for rel in m["files"])
    assert m["versions"]["torch"] and m["versions"]["executorch"] and m["versions"]["onnx"]
    assert not list(bundle_dir.parent.glob(".*partial"))
    assert m["policy"] == policy() and b.manifest.policy == policy()  # the runtime's constants, for the app


def test_an_export_leaves_the_draft_head_out_unless_asked(bundle_dir, tiny_checkpoints, tmp_path, monkeypatch):
    """The draft head pays on eager but not on ExecuTorch: bundles score every draft token unless --draft-head."""
    from omnidraft.export.build import export_bundle

    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path))
    assert load_bundle(bundle_dir).model("drafter").draft_head == {"tokens": TINY_HEAD_TOKENS}  # exported with it
    out = export_bundle(tmp_path / "plain", str(tiny_checkpoints["target"]), str(tiny_checkpoints["drafter"]),
                        formats=("onnx",), max_context=32, max_draft_len=2)
    assert load_bundle(out).model("drafter").draft_head is None
    drafter = build_bundle_pair(out, "onnxruntime", use_ngram_cache=False).drafter
    assert np.isfinite(drafter.forward([1, 5, 9], 0)[-1]).all()  # no token left out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("role", ["target", "drafter"])
def test_logits_match_eager(bundle_dir, tiny_checkpoints, backend, role):
    from omnidraft.draft_head import apply_draft_head
    from omnidraft.models import load_model

    b = load_bundle(bundle_dir)
    runner = open_runner(b, role, backend, threads=1)
    model = load_model(tiny_checkpoints[role])
    apply_draft_head(model, tiny_checkpoints[role])  # the drafter's (the target has none)
    eager = EagerRunner(model, runner.max_context)
    rng = np.random.default_rng(0)
    if role == "drafter":  # the graph's acceptance head, fed the same (random) weights as eager's
        runner.head.weight[:] = rng.normal(size=runner.head.n_features) * 0.2
        eager.head = runner.head
    ids = rng.integers(5, 40000, size=64)
    k_max = MAX_DRAFT + 1
    steps = [(ids[:20], 0), (ids[20:21], 20), (ids[21:25], 21), (ids[25 : 25 + k_max], 25),
             (ids[30:55], 30)]  # past two turns of the target's ring of 8 + 16 slots
    for tokens, start in steps:  # prefill (chunked), k=1, k=4, k=max
        assert_close(runner.forward(tokens, start, len(tokens)), eager.forward(tokens, start, len(tokens)))
        if role == "drafter":
            (f_graph, p_graph), (f_eager, p_eager) = runner.head_output, eager.head_output
            np.testing.assert_allclose(f_graph, f_eager, atol=1e-4)
            assert abs(p_graph - p_eager) < 1e-4 and abs(p_graph - float(runner.head.prob(f_graph))) < 1e-5
    for r in (runner, eager):
        r.rollback(52)  # reject the draft past position 52
    assert_close(runner.forward(ids[56:60], 52, 4), eager.forward(ids[56:60], 52, 4))


def test_target_graph_verifies_bit_for_bit(bundle_dir):
    """The ExecuTorch target graph's k-token call equals k one-token calls exactly (llama_ops.py).

    Past the tiny target's 8-token window and across the wrap of its sliding layers' ring (8 + 16 slots), so
    their masks are exercised too; the prefill chunk asks for one row of logits (the logit_rows input).
    """
    runner = open_runner(load_bundle(bundle_dir), "target", "executorch", threads=1)
    ids = np.random.default_rng(1).integers(5, 40000, size=60)
    k = MAX_DRAFT + 1
    for start in (24, 45):  # the second verification writes slots 21, 22, 23, 0, 1
        runner.rollback(0)
        runner.forward(ids[:start], 0, 1)
        several = runner.forward(ids[start:start + k], start, k)
        one_by_one = np.concatenate([runner.forward(ids[start + i:start + i + 1], start + i, 1) for i in range(k)])
        np.testing.assert_array_equal(several, one_by_one)


def test_a_rollback_deeper_than_the_ring_reads_the_text_again(bundle_dir):
    """The target's ring (8 + 16 slots) drops states 24 positions back: a rollback of at most 16 below the highest
    position written keeps the cache, a deeper one (a new prompt sharing only the old text's start) forgets it,
    and the prefill that follows reads the text afresh: the same logits as a fresh runner."""
    from omnidraft.runtime.runner import prefill

    b = load_bundle(bundle_dir)
    runner, fresh = (open_runner(b, "target", "executorch", threads=1) for _ in range(2))
    ids = [int(t) for t in np.random.default_rng(2).integers(5, 40000, size=60)]
    runner.forward(ids[:50], 0, 1)
    runner.rollback(34)  # 15 below the highest position written: kept
    assert runner.position == 34
    runner.forward(ids[34:50], 34, 1)
    runner.rollback(20)  # 29 below: the rings no longer hold what position 20 needs
    assert runner.position == 0
    seq = ids[:20] + ids[40:45]
    assert prefill(runner, seq) == 0 and runner.position == len(seq) - 1
    assert_close(runner.forward(seq[-1:], len(seq) - 1, 1), fresh.forward(seq, 0, 1))


def assert_close(got, want):
    """Within 1e-4 of the logit scale (these tiny models have logits of magnitude ~10-50).

    A draft head's -inf logits (tokens outside it) must be -inf in both.
    """
    scored = np.isfinite(want)
    np.testing.assert_array_equal(np.isfinite(got), scored)
    assert (got.argmax(-1) == want.argmax(-1)).all()
    got, want = got[scored], want[scored]
    scale = max(1.0, float(np.abs(want).max()))
    err = float(np.abs(got - want).max())
    assert err <= 1e-4 * scale, (err, scale)


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_speculative_equals_target_only_on_backend(bundle_dir, backend):
    from omnidraft.adaptation.predictor import AcceptancePredictor

    pair = build_bundle_pair(bundle_dir, backend, threads=1, use_ngram_cache=False)
    ids = pair.encode_prompt("def add(a, b):\n    return a +")
    base = SpeculativeDecoder(pair.decoder.target, pair.target_vocab).generate(
        ids, GenerationConfig(max_new_tokens=20, speculative=False))
    got = pair.decoder.generate(ids, GenerationConfig(max_new_tokens=20, draft_len=MAX_DRAFT))
    assert got.token_ids == base.token_ids
    assert pair.decoder.target.backend == backend and got.stats.drafted > 0
    # adaptive draft length through the graph's own head, which learns between the two runs
    pair.drafting.predictor = AcceptancePredictor(pair.drafter.head)
    for _ in range(2):
        got = pair.decoder.generate(ids, GenerationConfig(max_new_tokens=20, draft_policy="auto",
                                                          max_draft_len=MAX_DRAFT))
        assert got.token_ids == base.token_ids
    assert pair.predictor.updates == 2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("role", ["target", "drafter"])
def test_an_interrupted_generation_never_changes_the_next_on_backend(bundle_dir, backend, role):
    """Issue 51's property on the exported graphs: an exception right after a model call wrote its cache (the
    worst moment: ExecuTorch's cache is written in place) leaves the next greedy output and the cache exact."""
    from .test_interrupted import assert_cache_holds_its_tokens, interrupt_calls

    pair = build_bundle_pair(bundle_dir, backend, threads=1, use_ngram_cache=False)
    runner = pair.decoder.target if role == "target" else pair.drafter
    ids = pair.encode_prompt("def add(a, b):\n    return a +")
    other = pair.encode_prompt("Once upon a time")
    config = GenerationConfig(max_new_tokens=20, draft_len=MAX_DRAFT)
    want = {tuple(p): pair.decoder.generate(p, config, learn=False).token_ids for p in (ids, other)}
    for at in (1, 2, 4):
        undo = interrupt_calls(runner, at, inside=False)
        with pytest.raises(KeyboardInterrupt):
            pair.decoder.generate(ids, config)
        undo.remove()
        for p in (other, ids):
            assert pair.decoder.generate(p, config, learn=False).token_ids == want[tuple(p)]
    undo = interrupt_calls(runner, 2, inside=False)
    with pytest.raises(KeyboardInterrupt):
        pair.decoder.generate(other, config)
    undo.remove()
    assert_cache_holds_its_tokens(runner, open_runner(pair.bundle, role, backend, 1))


def _flip_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage, needle",
    [
        (lambda r: _flip_byte(r / "target.onnx"), "does not match its sha256"),
        (lambda r: (r / "drafter.pte").unlink(), "missing drafter.pte"),
        (lambda r: (r / "target.pte").write_bytes(b"x"), "wrong size"),
        (lambda r: (r / "bundle.json").write_text("{oops"), "bundle.json in"),
        (lambda r: (r / "bundle.json").unlink(), "no bundle.json"),
        (edit_manifest(lambda m: m.update(version=99)), "bundle version 99 is not supported"),
        (edit_manifest(lambda m: m["models"]["target"].pop("kv_shape")), "missing field"),
        (edit_manifest(lambda m: m["policy"]["hybrid"].update(explore_share=2.0)), "policy.hybrid.explore_share"),
    ],
)
def test_damaged_bundle_is_refused(bundle_dir, tmp_path, damage, needle):
    with pytest.raises(OmniDraftError, match=needle):
        build_bundle_pair(damaged_copy(bundle_dir, tmp_path, damage), "onnxruntime")


def _set_target(**fields):
    """bundle.json's target entry given other values, its kv_shape kept in step with max_context."""
    def edit(m):
        m["models"]["target"].update(fields)
        if "max_context" in fields:
            m["models"]["target"]["kv_shape"][3] = fields["max_context"]
            m["max_context"] = fields["max_context"]
    return edit_manifest(edit)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("damage, needle", [
    (_set_target(vocab_size=1000), "gives the target vocab_size 1000, but its"),
    (_set_target(max_context=100_000), "context of 100000 positions, more than its program|gives the target kv_shape"),
    (edit_manifest(lambda m: m.update(max_context=10**9)), "max_context \\(not the target's\\)"),
    (edit_manifest(lambda m: m.update(max_context=-1)), "max_context \\(not the target's\\)"),
    (_set_target(max_tokens_per_call=64), "gives the target max_tokens_per_call 64, but its"),
])
def test_bundle_json_values_are_checked_against_the_graphs(bundle_dir, tmp_path, backend, damage, needle):
    """Issue 51, defect 14: numbers in bundle.json that the graphs do not hold are refused when the bundle loads,
    one line each, never a failure mid-generation (an ONNX graph takes any number of tokens a call)."""
    if backend == "onnxruntime" and "max_tokens_per_call" in needle:
        return
    with pytest.raises(OmniDraftError, match=needle) as e:
        build_bundle_pair(damaged_copy(bundle_dir, tmp_path, damage), backend)
    assert "\n" not in str(e.value)


def test_bundle_of_another_tokenizer_is_refused(bundle_dir, tmp_path, drafter_path):
    """Swap in another model's tokenizer (with hashes fixed up): the fingerprint check catches it."""
    from omnidraft.bundle import file_entry
    from omnidraft.models import load_tokenizer

    def swap(root):
        tok_dir = root / "tokenizers" / "target"
        shutil.rmtree(tok_dir)
        load_tokenizer(drafter_path).save_pretrained(tok_dir)

        def refile(m):
            m["files"] = {k: v for k, v in m["files"].items() if not k.startswith("tokenizers/target/")}
            for p in tok_dir.iterdir():
                rel = str(p.relative_to(root))
                m["files"][rel] = file_entry(root, rel)
        edit_manifest(refile)(root)

    with pytest.raises(OmniDraftError, match="target tokenizer does not match"):
        build_bundle_pair(damaged_copy(bundle_dir, tmp_path, swap), "onnxruntime")


def test_draft_len_beyond_export_and_missing_backend(bundle_dir, tmp_path):
    b = load_bundle(bundle_dir)
    b.check_draft_len(MAX_DRAFT)
    with pytest.raises(OmniDraftError, match=f"exceeds the bundle's exported maximum of {MAX_DRAFT}"):
        b.check_draft_len(MAX_DRAFT + 1)
    pair = build_bundle_pair(bundle_dir, "onnxruntime", use_ngram_cache=False)
    with pytest.raises(OmniDraftError, match="context window"):
        pair.decoder.target.forward(np.arange(70), 0)
    with pytest.raises(OmniDraftError, match="bundle folder not found"):
        load_bundle(tmp_path / "nope")


def cli(*args, home):
    return run_cli(*args, home=home)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cli_generate_on_bundle(bundle_dir, tmp_path, backend):
    """generate --bundle with adaptive draft length: the head learns and is saved; the next run resumes it."""
    auto = ("generate", "--backend", backend, "--bundle", str(bundle_dir), "--prompt", "Hello world",
            "--max-new-tokens", "6", "--draft-len", "auto", "--max-draft-len", str(MAX_DRAFT), "--gamma", "0.7",
            "--json", "--threads", "1", "--proposer", "drafter")  # the drafter every round: its head learns every run
    for updates in (1, 2):
        proc = cli(*auto, home=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr.strip() == "", proc.stderr  # no runtime noise on a successful run
        report = json.loads(proc.stdout)
        assert report["backend"] == backend and report["new_tokens"] == 6 and report["cross_vocab"]
        assert report["text"] and report["draft_len"] == "auto" and report["predictor"]["updates"] == updates
        assert 0 < report["mean_draft_len"] <= MAX_DRAFT
    assert len(list((tmp_path / "adapters").glob("*.head.npz"))) == 1


@pytest.mark.parametrize(
    "args, needle",
    [
        (["generate", "--backend", "onnxruntime", "--prompt", "x"], "needs --bundle DIR"),
        (["generate", "--bundle", "BUNDLE", "--prompt", "x"], "not eager"),
        (["generate", "--backend", "onnxruntime", "--bundle", "/no/bundle", "--prompt", "x"], "bundle folder not found"),
        (["generate", "--backend", "executorch", "--bundle", "BUNDLE", "--prompt", "x", "--draft-len", "5"],
         "exceeds the bundle's exported maximum of 4"),
        (["generate", "--backend", "onnxruntime", "--bundle", "BUNDLE", "--prompt", "x", "--draft-len", "auto",
          "--max-draft-len", "8"], "exceeds the bundle's exported maximum of 4"),  # the default cap fits the bundle
        (["generate", "--backend", "executorch", "--bundle", "BUNDLE", "--prompt", "x", "--target", "/x"],
         "do not apply to a bundle"),
        (["export", "--format", "onnx", "--quant", "8da4w", "--out", "OUT"], "not available for onnx"),
        (["export", "--format", "both", "--quant", "int8", "--out", "OUT"], "not available for executorch"),
        (["export", "--target", "/no/model", "--out", "OUT"], "model path does not exist"),
        (["export", "--format", "onnx", "--drafter-quant", "8da8w", "--out", "OUT"], "not available for onnx"),
        (["export", "--format", "onnx", "--embedding-quant", "int8", "--out", "OUT"], "applies to ExecuTorch"),
    ],
)
def test_cli_bundle_errors(bundle_dir, tmp_path, args, needle):
    args = [str(bundle_dir) if a == "BUNDLE" else str(tmp_path / "out") if a == "OUT" else a for a in args]
    proc = cli(*args, home=tmp_path)
    assert proc.returncode == 1, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("fmt, quant, embedding", [("onnx", "int8", "none"), ("executorch", "8da4w", "none"),
                                                    ("executorch", "8da8w", "int4")])
def test_quantized_graph_top1_agreement(tmp_path, target_path, target_vocab, fmt, quant, embedding):
    """Top-1 agreement of a quantized tiny target with fp32 eager on real text.

    The tiny target here has a reduced vocabulary of 8,192 tokens (the text's ids folded into
    it): export and quantization time scale with the vocabulary, the numerics tested do not.
    Floor 0.5: a broken graph (wrong cache, scrambled weights) agrees at chance, about
    1/8192; honest int8/int4 error on this random model flips only the tokens whose top two
    logits are close. The real pair's figures are measured by benchmarks/backends.py.
    """
    import copy

    vocab = 8192
    ids = [t % vocab for t in target_vocab.tokenizer.encode(
        "ROMEO. But soft, what light through yonder window breaks? It is the east, and Juliet is the sun. "
        "def add(a, b):\n    return a + b\n")[:48]]
    model = tiny_model(target_path, seed=1, sliding_window=8, vocab_size=vocab)
    eager = EagerRunner(copy.deepcopy(model), 64)
    want = np.concatenate([eager.forward(ids[i:i + 8], i, len(ids[i:i + 8])) for i in range(0, len(ids), 8)])
    if fmt == "onnx":
        from omnidraft.export.onnx_export import export_onnx
        from omnidraft.runtime.onnx_runner import OnnxRunner

        meta = export_onnx(model, tmp_path / "t.onnx", 64, 8, quant)
        runner = OnnxRunner(tmp_path / "t.onnx", meta, threads=1)
    else:
        from omnidraft.export.executorch_export import export_executorch
        from omnidraft.runtime.executorch_runner import ExecuTorchRunner

        meta = export_executorch(model, tmp_path / "t.pte", 64, 8, quant, embedding_quant=embedding)
        assert meta["executorch_ops"] == ["llama"] + ([] if embedding == "none" else ["quantized"])
        runner = ExecuTorchRunner(tmp_path / "t.pte", meta)
    got = np.concatenate([runner.forward(ids[i:i + 8], i, len(ids[i:i + 8])) for i in range(0, len(ids), 8)])
    agreement = float((got.argmax(-1) == want.argmax(-1)).mean())
    print(f"{fmt} {quant} top-1 agreement with fp32 eager: {agreement:.3f}")
    assert agreement >= 0.5
    # Greedy exactness on a quantized backend needs each position's logits to be
    # independent of the other tokens in the call (no per-tensor activation scales); the
    # ExecuTorch target graph's rows are (llama_ops.py): equal bit for bit, sliding layers too.
    runner.reset()
    one_by_one = np.concatenate([runner.forward(ids[i:i + 1], i, 1) for i in range(24)])
    if fmt == "executorch":
        np.testing.assert_array_equal(got[:24], one_by_one)
    else:
        assert_close(got[:24], one_by_one)


@pytest.mark.parametrize("bits", ["int8", "int4"])
def test_quantized_embedding_rows(target_path, bits):
    """Gemma's scaled embedding, quantized: every row within half a quantization step of the float row."""
    import torch

    from omnidraft.export.quant_embedding import GROUP, QuantizedEmbedding

    model = tiny_model(target_path, seed=1, vocab_size=512)
    table = model.get_input_embeddings()
    quantized = QuantizedEmbedding(table, bits)
    ids = torch.arange(512).reshape(1, -1)
    want, got = table(ids)[0], quantized(ids)[0]
    step = quantized.scales.repeat_interleave(GROUP, dim=1) * table.embed_scale  # per element
    assert got.shape == want.shape and quantized.weight.dtype == (torch.int8 if bits == "int8" else torch.uint8)
    assert bool(((got - want).abs() <= step / 2 + 1e-5).all())
    assert float((got - want).abs().max()) > 0  # it did quantize


@pytest.mark.parametrize("backend", [None, "onnxruntime"])
def test_simulator_chat_session_and_report(bundle_dir, tmp_path, backend):
    """Two chat turns through stdin, on the bundle's ExecuTorch programs by default (the phone's runtime) or on
    onnxruntime, then the JSON report and the plot."""
    choice = ("--backend", backend) if backend else ()
    proc = run_cli("simulate", "--bundle", bundle_dir, "--threads", "1", "--max-new-tokens", "8", "--report",
                   tmp_path / "rep", *choice, home=tmp_path, stdin="Hello there\nAnd again?\n\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("model> ") == 2
    assert proc.stderr.count("tok/call") == 2 and "RSS" in proc.stderr
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert report["backend"] == (backend or "executorch") and len(report["turns"]) == 2
    assert report["turns"][1]["prompt_tokens_reused"] > 0  # the second turn reused the first's cache
    assert report["peak_rss_mb"] >= report["rss_after_load_mb"] > 0
    assert (tmp_path / "rep" / "simulator.png").stat().st_size > 10_000


def _chat(bundle_dir, home, *extra):
    return run_cli("simulate", "--bundle", bundle_dir, "--threads", "1", "--max-new-tokens", "8", "--report",
                   home / "rep", *extra, home=home, stdin="Hello there\nAnd again?\nOnce more.\n\n")


def test_simulator_adapts_lora_on_executorch_and_stays_exact(bundle_dir, tmp_path):
    """--adapt: LoRA steps through the bundle's training program between turns (drafter on
    ExecuTorch, target on onnxruntime); greedy replies equal those of a session without it."""
    plain = _chat(bundle_dir, tmp_path / "plain")
    adapted = _chat(bundle_dir, tmp_path / "adapt", "--adapt", "--adapt-every", "1", "--adapt-lr", "0.05",
                    "--profile", "sim")
    assert plain.returncode == 0 and adapted.returncode == 0, adapted.stderr
    assert "drafter learning on ExecuTorch (profile sim)" in adapted.stderr
    assert adapted.stderr.count("LoRA updates") == 3 and "LoRA updates 2 " in adapted.stderr
    reports = [json.loads((tmp_path / h / "rep" / "report.json").read_text()) for h in ("plain", "adapt")]
    assert [t["text"] for t in reports[0]["turns"]] == [t["text"] for t in reports[1]["turns"]]
    assert reports[0]["drafter_backend"] == "executorch" and reports[1]["drafter_backend"] == "executorch"
    # the first reply is held out for the update guard; each later one brings an update
    assert [t["adaptation"]["updates"] for t in reports[1]["turns"]] == [0, 1, 2]
    assert Path(reports[1]["adapter"]).exists() and Path(reports[1]["adapter"]).name.endswith("--sim.pt")


def test_a_scripted_chat_longer_than_the_window_moves_it_and_never_errs(bundle_dir, tmp_path):
    """A 14-turn script in the tiny bundle's 64-position window: the oldest turns are dropped (the system prompt
    kept), each turn reports its speed and time to first text, and the session never dead-ends."""
    script = tmp_path / "chat.txt"
    script.write_text("\n".join(f"Message number {i}, tell me more." for i in range(14)))
    proc = run_cli("simulate", "--bundle", bundle_dir, "--threads", "1", "--max-new-tokens", "6", "--script", script,
                   "--system", "Be brief.", "--report", tmp_path / "rep", home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("model> ") == 14 and proc.stderr.count("tok/call") == 14
    assert "window moved" in proc.stderr and "first text after" in proc.stderr
    turns = json.loads((tmp_path / "rep" / "report.json").read_text())["turns"]
    assert sum(t["dropped_turns"] for t in turns) > 0 and all(t["stop_reason"] != "interrupted" for t in turns)
    bad = tmp_path / "empty.txt"
    bad.write_text("\n\n")
    proc = run_cli("simulate", "--bundle", bundle_dir, "--script", bad, home=tmp_path)
    assert proc.returncode == 1 and "holds no message" in proc.stderr


def test_simulator_adapt_needs_a_training_bundle(bundle_dir, tmp_path):
    bad = damaged_copy(bundle_dir, tmp_path, WITHOUT_TRAINING)
    proc = cli("simulate", "--bundle", str(bad), "--prompt", "hi", "--adapt", home=tmp_path)
    assert proc.returncode == 1
    assert [x for x in proc.stderr.splitlines() if x.strip()] == [
        "omnidraft: error: --adapt needs a bundle exported --with-training (its LoRA training program)"]


def test_simulator_refuses_a_damaged_bundle(bundle_dir, tmp_path):
    bad = damaged_copy(bundle_dir, tmp_path, lambda r: _flip_byte(r / "drafter.onnx"))
    proc = cli("simulate", "--bundle", str(bad), "--prompt", "hi", home=tmp_path)
    assert proc.returncode == 1
    assert [x for x in proc.stderr.splitlines() if x.strip()] == [
        "omnidraft: error: bundle file drafter.onnx does not match its sha256 (corrupt or replaced); re-export the bundle"
    ]
