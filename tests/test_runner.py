"""The eager runner's static cache: chunked calls and rollbacks give the logits of one full pass."""

import numpy as np
import pytest
import torch

from omnidraft.errors import OmniDraftError
from omnidraft.runtime.runner import EagerRunner


def full_pass(model, ids):
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits[0].numpy()


@pytest.mark.parametrize("which", ["tiny_target_model", "tiny_drafter_model"])
def test_chunks_and_rollback_match_a_full_pass(which, request):
    model = request.getfixturevalue(which)
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 1000, size=40).tolist()  # longer than the tiny target's sliding window (8)
    want = full_pass(model, ids)
    runner = EagerRunner(model, 64)
    got = runner.forward(ids[:10], 0, 10)
    np.testing.assert_allclose(got, want[:10], atol=1e-4, rtol=1e-4)
    runner.forward([7, 8, 9, 10, 11], 10, 5)  # a rejected draft...
    runner.rollback(10)  # ...is forgotten
    got = runner.forward(ids[10:14], 10, 4)
    np.testing.assert_allclose(got, want[10:14], atol=1e-4, rtol=1e-4)
    for i in range(14, 40):
        got = runner.forward([ids[i]], i, 1)
        np.testing.assert_allclose(got[0], want[i], atol=1e-4, rtol=1e-4)
    assert runner.position == 40


def test_limits(tiny_drafter_model):
    runner = EagerRunner(tiny_drafter_model, 16)
    with pytest.raises(OmniDraftError, match="context window of 16"):
        runner.forward(list(range(17)), 0)
    runner.forward([1, 2, 3], 0)
    with pytest.raises(ValueError, match="cannot write at 5"):
        runner.forward([4], 5)
    assert runner.forward([4, 5, 6], 3, 2).shape == (2, runner.vocab_size)


def test_chunks_rows_rings_and_interruptions():
    """Long inputs go in chunks of max_tokens_per_call, each returning at most max_logit_rows rows; a rollback
    deeper than a ring's slack forgets the cache (the Java core's LoopTest checks the same rules)."""
    import numpy as np

    from omnidraft.runtime.runner import ModelRunner, Step

    calls = []

    class Positions(ModelRunner):
        def _forward(self, tokens, start, n_logits):
            calls.append((len(tokens), start, n_logits))
            out = np.zeros((n_logits, 8), dtype=np.float32)
            out[:, 0] = np.arange(start + len(tokens) - n_logits, start + len(tokens))  # each row: its position
            return Step(out)

    r = Positions(8, 100, max_tokens_per_call=16, max_logit_rows=4, ring_slack=10)
    ids = [i % 8 for i in range(40)]
    rows = r.forward(ids[:37], 0, 6)
    assert rows[:, 0].tolist() == list(range(31, 37)) and [c[0] for c in calls] == [16, 16, 4, 1]
    r.rollback(27)  # 9 below the highest position written (36): kept
    assert r.position == 27 and r.tokens == ids[:27]
    r.forward(ids[27:37], 27, 1)
    r.rollback(20)  # 16 below: past the slack of 10, all forgotten
    assert r.position == 0 and r.tokens == []
