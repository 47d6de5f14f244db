"""Crash safety: a process killed with SIGKILL while saving leaves the old or the new file, never a torn one."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from omnidraft.runtime.ngram_cache import NGramCache

from .helpers import HANG_GUARD_SECONDS

SAVER = r"""
import sys
from omnidraft.runtime.ngram_cache import NGramCache
path, = sys.argv[1:]
version = 0
while True:
    version += 1
    cache = NGramCache("pair", max_entries=100_000)
    for i in range(20_000):  # about 0.5 MB per save; the same spellings, a new target id per version
        cache.add(version, [i, i + 1, 2])
    cache.save(path)
    print(version, flush=True)
"""


@pytest.mark.parametrize("trials", [int(os.environ.get("OMNIDRAFT_CRASH_TRIALS", "8"))])
def test_sigkill_while_saving_never_corrupts(tmp_path, trials):
    path = tmp_path / "cache.json"
    rng = np.random.default_rng(0)
    for trial in range(trials):
        proc = subprocess.Popen([sys.executable, "-c", SAVER, str(path)], stdout=subprocess.PIPE, text=True)
        time.sleep(float(rng.uniform(0.3, 1.5)))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if not path.exists():
            continue
        loaded = NGramCache.load(path, "pair")  # raises on a torn file
        versions = {t for _, t, _ in loaded.items()}
        assert len(versions) == 1 and len(loaded) == 20_000
    assert path.exists()
    leftovers = [p.name for p in tmp_path.iterdir() if p.name not in ("cache.json", "cache.json.lock")]
    # a kill between create and rename can leave a temp file behind; it is never the real name
    assert all(name.startswith(".cache.json.") and name.endswith(".tmp") for name in leftovers)


ADAPTER_SAVER = r"""
import sys
from pathlib import Path
import torch
from omnidraft.adaptation.lora import lora_parameters
from omnidraft.adaptation.online import AdaptConfig, attach
from omnidraft.models import DEFAULT_DRAFTER, load_tokenizer
from omnidraft.catalog import resolve_model_path
from omnidraft.runtime.bridge import VocabBridge
from omnidraft.runtime.vocab import Vocab
from tests.helpers import tiny_model

path, = sys.argv[1:]
drafter = resolve_model_path(None, DEFAULT_DRAFTER)
vocab = Vocab.from_tokenizer(load_tokenizer(drafter))
adapter = attach(tiny_model(drafter, seed=2), VocabBridge(vocab, vocab), AdaptConfig(), Path(path), {}, False, print)
params = lora_parameters(adapter.learner.model)
version = adapter.stats.updates
while True:  # every save: all LoRA tensors and the update counter hold the same number
    version += 1
    with torch.no_grad():
        for p in params.values():
            p.fill_(version)
    adapter.stats.updates = version
    adapter.save()
    print(version, flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("trials", [int(os.environ.get("OMNIDRAFT_CRASH_TRIALS", "4"))])
def test_sigkill_while_saving_the_adapter_never_corrupts(tmp_path, trials, drafter_path, draft_vocab):
    """Killed at any moment, a restart resumes the last complete adapter: old or new, never torn."""
    import torch

    from omnidraft.adaptation.lora import lora_parameters
    from omnidraft.adaptation.online import AdaptConfig, attach
    from omnidraft.runtime.bridge import VocabBridge

    from .helpers import tiny_model

    path = tmp_path / "adapter.pt"
    rng = np.random.default_rng(1)
    root = Path(__file__).resolve().parent.parent
    last = 0
    for trial in range(trials):
        proc = subprocess.Popen([sys.executable, "-c", ADAPTER_SAVER, str(path)], stdout=subprocess.PIPE, text=True,
                                cwd=root)
        while not proc.stdout.readline().strip().isdigit():  # started saving (after its own start-up)
            assert proc.poll() is None, "the saver died on its own"
        time.sleep(float(rng.uniform(0.0, 0.5)))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        messages = []
        adapter = attach(tiny_model(drafter_path, seed=2), VocabBridge(draft_vocab, draft_vocab), AdaptConfig(), path,
                         {}, False, messages.append)
        assert messages and "resumed adapter" in messages[0], messages  # not set aside as bad
        version = adapter.stats.updates
        assert version > last  # every trial resumed and saved at least once more
        for p in lora_parameters(adapter.learner.model).values():
            torch.testing.assert_close(p, torch.full_like(p, version), rtol=0, atol=0)
        last = version
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "adapter.pt"]
    assert all(name.startswith(".adapter.pt.") and name.endswith(".tmp") for name in leftovers)


def test_unwritable_state_folder_still_generates(tmp_path, monkeypatch, tiny_target, tiny_drafter, target_vocab,
                                                 draft_vocab):
    """State folder that cannot be created or written: one warning, generation unaffected."""
    from omnidraft.pair import Pair
    from omnidraft.runtime.decoding import GenerationConfig, SpeculativeDecoder

    dec = SpeculativeDecoder.with_drafter(tiny_target, target_vocab, tiny_drafter, draft_vocab, ngram_cache=True)
    blocker = tmp_path / "state"
    blocker.write_text("a file where the state folder should be")  # fails even for root
    pair = Pair(dec, "t", "d", dec.target_vocab, drafting=dec.proposer, cache_path=blocker / "ngram" / "cache.json")
    result = dec.generate(target_vocab.tokenizer.encode("Hello"), GenerationConfig(max_new_tokens=5))
    assert len(result.token_ids) == 5
    messages = []
    monkeypatch.setattr("omnidraft.pair.log", messages.append)
    pair.save_cache()
    assert len(messages) == 1 and "could not save the n-gram cache" in messages[0]


def test_full_disk_save_warns_and_keeps_old_file(tmp_path, monkeypatch):
    """ENOSPC while saving: the old file stays intact and the user is told in one line."""
    import omnidraft.atomic as atomic
    from omnidraft.pair import Pair

    path = tmp_path / "cache.json"
    cache = NGramCache("pair")
    cache.add(1, [1, 2])
    cache.save(path)
    before = path.read_bytes()
    cache.add(2, [3, 4])

    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", no_space)
    messages = []
    monkeypatch.setattr("omnidraft.pair.log", messages.append)

    from omnidraft.adaptation.predictor import AcceptancePredictor
    from omnidraft.runtime.acceptance import AcceptanceHead

    class _Drafting:  # Pair.save_cache only reads what the drafter learned online
        ngram_cache = cache
        predictor = AcceptancePredictor(AcceptanceHead.initial(6))
        bridge = None

    Pair(None, "t", "d", None, drafting=_Drafting(), cache_path=path,
         predictor_path=tmp_path / "head.npz").save_cache()
    assert path.read_bytes() == before
    assert len(messages) == 2 and all("No space left on device" in m for m in messages)
    assert "acceptance head" in messages[1]
    # no head file, no temporary left (the lock files beside the state files are how processes share them)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache.json", "cache.json.lock", "head.npz.lock"]


@pytest.mark.slow
def test_soak_command_reports_memory_cache_rollbacks_and_acceptance(tmp_path, tiny_checkpoints):
    """The soak's long variant (benchmarks/soak.py --generations 1000) in miniature, on tiny models."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "soak.py"), "--out", str(tmp_path / "soak"), "--generations", "4",
         "--window", "2", "--max-new-tokens", "4", "--threads", "1", "--probe", "1",
         "--target", str(tiny_checkpoints["target"]), "--drafter", str(tiny_checkpoints["drafter"])],
        capture_output=True, text=True, timeout=HANG_GUARD_SECONDS, env={**os.environ, "OMNIDRAFT_HOME": str(tmp_path)})
    assert proc.returncode in (0, 1), proc.stderr[-2000:]  # 1: a check failed (reported, not a crash)
    assert (tmp_path / "soak" / "results.json").exists(), proc.stdout[-1500:] + proc.stderr[-2500:]
    r = json.loads((tmp_path / "soak" / "results.json").read_text())
    assert [w["generations"] for w in r["windows"]] == [2, 4]
    for w in r["windows"]:
        assert w["rss_mb"] > 0 and w["ngram_cache"] >= 0 and 0 <= w["acceptance_rate"] <= 1
        assert 0 <= w["probe_acceptance"] <= 1
        assert w["rollbacks"] <= w["updates"] and w["head_updates"] >= 2
    assert r["windows"][-1]["updates"] >= 1  # an adapter update every 4 prompts
    assert set(("rss_growth", "memory_flat", "windows_below_baseline", "acceptance_ok")) <= set(r)
    assert (proc.returncode == 0) == (r["memory_flat"] and r["acceptance_ok"])
    assert r["probe_prompts"] == 3 and 0 <= r["baseline_acceptance"] <= 1
    assert "RSS growth" in (tmp_path / "soak" / "table.md").read_text()
