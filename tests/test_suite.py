"""The benchmark suite (benchmarks/suite.py) in miniature: tiny models, every kind of system, one process."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import HANG_GUARD_SECONDS, TINY_MAX_DRAFT

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_suite_runs_every_method_on_eager_executorch_and_onnxruntime(tmp_path, tiny_checkpoints, tiny_bundle):
    out = tmp_path / "suite"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "suite.py"), "--out", str(out), "--warmup", "4", "--prompts", "1",
         "--max-new-tokens", "6", "--prompt-chars", "60", "--threads", "1", "--cap", str(TINY_MAX_DRAFT),
         "--draft-len", "3", "--target", str(tiny_checkpoints["target"]), "--drafter", str(tiny_checkpoints["drafter"]),
         "--bundle", str(tiny_bundle), "--extended", "--workloads", "prose,structured"],
        capture_output=True, text=True, timeout=HANG_GUARD_SECONDS, env={**os.environ, "OMNIDRAFT_HOME": str(tmp_path / "home")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads((out / "results.json").read_text())
    systems = {s["system"].split(",")[0]: s for s in r["systems"]}
    assert set(systems) == {"eager fp32", "executorch", "onnxruntime"}
    adapted = "adapted: LoRA + auto + cache"
    expected = {"target-only", "k=3, no n-gram cache", "k=3 + n-gram cache", "drafter (auto + n-gram cache)",
                "lookup", "hybrid (lookup + drafter auto)"}
    for s in r["systems"]:
        assert set(s["groups"]) == {"open-ended", "repetitive"}
    assert set(systems["onnxruntime"]["groups"]["repetitive"]) == expected  # onnxruntime cannot train LoRA
    assert set(systems["executorch"]["groups"]["repetitive"]) == expected | {adapted}  # the bundle's training program
    assert set(systems["eager fp32"]["groups"]["open-ended"]) == expected | {adapted, "HF generate (target-only)",
                                                                             "HF assisted (other tokenizer)"}
    for s in r["systems"]:
        assert s["cost_ratio_c"] > 0
        for rows in s["groups"].values():
            for name, m in rows.items():
                assert m["outputs_differing"] == 0, (s["system"], name)  # greedy: every method equals target-only
                assert m["new_tokens"] > 0 and m["tokens_per_s"] > 0
                if m["acceptance_rate"] is not None and "ceiling" in m:
                    assert 0 <= m["acceptance_rate"] <= 1 and m["ceiling"] > 0
            assert rows["target-only"]["speedup"] == 1.0
            assert rows["lookup"]["lookup_query_ms"] > 0
        if "executorch" in s["system"] or "eager" in s["system"]:
            for d in s["workloads"].values():
                assert d["adaptation"]["updates"] == 1  # 4 warm-up prompts: one LoRA update
    table = (out / "table.md").read_text()
    assert f"| onnxruntime, {tiny_bundle.name} | " in table and "ceiling" in table and "lookup share" in table
    assert (out / "suite.png").stat().st_size > 10_000
