"""One Model, many callers: an interrupted generation, two threads, two live streams and learn=False never
change what a later generation outputs or what the profile keeps (issue 51, defects 1, 2, 3 and 7).

The property: whatever interrupted a generation (an exception raised from inside a model call, at a random
point of the target's or the drafter's calls), the next greedy generation of the same Model equals a fresh
Model's output, token for token. Eager here (tiny random models, fast tier); ExecuTorch and onnxruntime in
test_export.py's bundle tests.
"""

from __future__ import annotations

import os
import random
import threading
from unittest import mock

import pytest

import omnidraft
from omnidraft.runtime.runner import EagerRunner

PROMPT = "def fib(n):\n    "
OTHER = "Once upon a time, in a small village,"


@pytest.fixture
def load(tmp_path, tiny_checkpoints):
    """load(**options): a Model of the tiny pair in this test's own home."""
    opened = []

    def open_model(**options):
        with mock.patch.dict(os.environ, {"OMNIDRAFT_HOME": str(tmp_path / "home")}):
            m = omnidraft.load(target=str(tiny_checkpoints["target"]), drafter=str(tiny_checkpoints["drafter"]),
                               **options)
        opened.append(m)
        return m

    yield open_model


def greedy(m, prompt, n=24):
    return m.generate(prompt, max_new_tokens=n, learn=False).token_ids


def interrupt_calls(runner, at: int, inside: bool):
    """Make the runner's `at`-th model call raise KeyboardInterrupt: from inside the model, between its
    layers (eager; inside=True), or right after the call wrote the cache (any backend)."""
    calls = [0]

    def count():
        calls[0] += 1
        if calls[0] == at:
            raise KeyboardInterrupt

    if inside:  # before the last layer runs: the earlier layers have written this call's positions
        layer = runner.model.base_model.layers[-1]
        return layer.register_forward_pre_hook(lambda *_: count())
    real = runner._forward

    def forward(*args):
        step = real(*args)
        count()
        return step

    runner._forward = forward

    class Undo:
        def remove(self):
            runner._forward = real

    return Undo()


def model_calls(runner) -> int:
    return runner.calls


def assert_cache_holds_its_tokens(runner, fresh) -> None:
    """The runner's cache holds exactly the tokens it claims: a probe read over it gives the logits a fresh
    runner of the same model gives over those tokens written afresh (tolerance: the calls differ in shape)."""
    import numpy as np

    tokens, probe = list(runner.tokens), [5, 17, 3]
    got = runner.forward(probe, runner.position, len(probe))
    want = fresh.forward(tokens + probe, 0, len(probe))
    finite = np.isfinite(want)  # a drafter's frequency-ranked head gives -inf outside its tokens
    assert (np.isfinite(got) == finite).all()
    scale = float(np.abs(want[finite]).max())
    assert float(np.abs(got[finite] - want[finite]).max()) <= 1e-4 * scale


@pytest.mark.parametrize("trial", range(6))
def test_an_interrupted_generation_never_changes_the_next_greedy_output(load, trial):
    rng = random.Random(trial)
    fresh = load()
    want = {p: greedy(fresh, p) for p in (PROMPT, OTHER)}
    role = rng.choice(["target", "drafter"])
    inside = rng.random() < 0.6
    m = load(proposer="drafter" if role == "drafter" else "hybrid")  # the hybrid may leave the drafter idle
    runner = m.pair.decoder.target if role == "target" else m.pair.drafter
    before = model_calls(runner)
    m.generate(PROMPT, max_new_tokens=40, learn=False)  # how many calls a whole generation makes
    total = model_calls(runner) - before
    assert total > 0
    at = rng.randrange(1, total + 1)
    undo = interrupt_calls(runner, at, inside)
    with pytest.raises(KeyboardInterrupt):
        m.generate(PROMPT, max_new_tokens=40)
    undo.remove()
    assert m.last is None or m.last.stop_reason != "interrupted"  # the API never reports a dropped result
    for p in (PROMPT, OTHER) if trial % 2 else (OTHER, PROMPT):
        assert greedy(m, p) == want[p], (role, inside, at, total)
    # tiny random models are robust to a corrupted cache: check the cache itself too
    undo = interrupt_calls(runner, 2, inside)
    with pytest.raises(KeyboardInterrupt):
        m.generate(OTHER, max_new_tokens=40)
    undo.remove()
    assert_cache_holds_its_tokens(runner, EagerRunner(runner.model, runner.max_context))


def test_a_stream_interrupted_inside_a_call_leaves_the_model_exact(load):
    fresh = load()
    want = greedy(fresh, PROMPT)
    m = load()
    undo = interrupt_calls(m.pair.decoder.target, 3, inside=True)
    it = m.stream(PROMPT, max_new_tokens=40)
    with pytest.raises(KeyboardInterrupt):
        for _ in it:
            pass
    undo.remove()
    assert greedy(m, PROMPT) == want
    assert_cache_holds_its_tokens(m.pair.decoder.target, EagerRunner(m.pair.decoder.target.model, 256))


def test_one_model_used_from_two_threads_serves_both_exactly(load):
    fresh = load()
    want = {p: greedy(fresh, p, 32) for p in (PROMPT, OTHER)}
    m = load()
    got, errors = {}, []

    def work(prompt):
        try:
            for _ in range(3):
                got.setdefault(prompt, []).append(m.generate(prompt, max_new_tokens=32).token_ids)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(p,)) for p in (PROMPT, OTHER)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(ids == want[p] for p in want for ids in got[p])
    assert greedy(m, OTHER, 32) == want[OTHER]  # and the Model is whole afterwards


def test_a_new_generation_ends_a_suspended_stream_as_cancelled(load):
    fresh = load()
    want = {p: fresh.generate(p, max_new_tokens=30, learn=False) for p in (PROMPT, OTHER)}
    m = load()
    it1 = m.stream(PROMPT, max_new_tokens=30)
    first = next(it1)
    it2 = m.stream(OTHER, max_new_tokens=30)
    assert "".join(it2) == m.last.text and m.last.token_ids == want[OTHER].token_ids
    text = first + "".join(it1)  # ended by it2: the text of the rounds it had, then no error
    assert text and want[PROMPT].text.startswith(text) and len(text) < len(want[PROMPT].text)
    it3 = m.stream(PROMPT, max_new_tokens=30)
    next(it3)
    r = m.generate(OTHER, max_new_tokens=30)  # a generate() while a stream is suspended
    assert r.token_ids == want[OTHER].token_ids
    list(it3)
    assert greedy(m, PROMPT, 30) == want[PROMPT].token_ids


def test_learn_false_keeps_nothing_of_the_generation(load, tmp_path):
    m = load()
    m.generate(PROMPT, max_new_tokens=24)
    m.save()
    home = tmp_path / "home"
    files = {p: p.read_bytes() for p in home.rglob("*") if p.is_file() and "models" not in p.parts}
    assert any("heads" in str(p) or "head" in p.name for p in files) or files  # something was saved
    head = m.pair.predictor
    weights = None if head is None else (head.head.weight.copy(), head.updates, head.seen)
    scorer = m.pair.lookup.scorer.weights.copy()
    cache = None if m.pair.ngram_cache is None else len(m.pair.ngram_cache)
    costs = m.pair.hybrid.state()
    for p in (OTHER, "import os\nimport sys\n", PROMPT):
        m.generate(p, max_new_tokens=24, learn=False)
    if head is not None:
        assert head.updates == weights[1] and head.seen == weights[2] and (head.head.weight == weights[0]).all()
    assert (m.pair.lookup.scorer.weights == scorer).all()
    assert cache is None or len(m.pair.ngram_cache) == cache
    assert m.pair.hybrid.state() == costs
    m.save()
    after = {p: p.read_bytes() for p in home.rglob("*") if p.is_file() and "models" not in p.parts}
    assert after.keys() == files.keys()
    assert all(after[p] == files[p] for p in files), [p.name for p in files if after[p] != files[p]]
