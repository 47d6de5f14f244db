"""The exported programs on the phone's instruction set: arm64 under qemu user-mode emulation.

Opt-in (`make test-arm64`, marker arm64): the first run builds the arm64 environment
(tools/arm64/env.py, about 4 GB in $OMNIDRAFT_HOME/arm64). The tiny bundle runs here; the
real pair's bundles run when OMNIDRAFT_ARM64_BUNDLES names them (comma-separated folders),
each taking several minutes under emulation.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools/arm64"))

from env import default_home  # noqa: E402

pytestmark = pytest.mark.arm64
HOME = default_home()  # the user's, read before each test gets its own $OMNIDRAFT_HOME
REAL = [Path(p) for p in os.environ.get("OMNIDRAFT_ARM64_BUNDLES", "").split(",") if p]


def _report(bundle: Path, out: Path, prompts: int, new_tokens: int) -> dict:
    from report import render, run_both

    r = run_both(bundle, out, "a76", prompts, new_tokens, HOME)
    print(render(r, f"tests/test_arm64.py on {bundle}"))
    assert r["programs"]["aarch64"] == r["programs"]["x86_64"]  # every program and method loaded on arm64
    for p in r["prompts"]:
        assert p["arm_exact"] and p["x86_exact"], p  # speculative greedy == the target's own, on each machine
    for role, by_machine in r["operators"].items():  # the same program runs the same operators
        assert set(by_machine["aarch64"]) == set(by_machine["x86_64"]), role
    return r


def test_tiny_bundle_on_arm64(tiny_bundle, tmp_path):
    r = _report(tiny_bundle, tmp_path, prompts=2, new_tokens=12)
    assert all(p["same_as_x86"] for p in r["prompts"])  # fp32: the arm64 output is the x86 output
    assert r["logits"]["target"]["max_abs"] <= 1e-3 * max(1.0, r["logits"]["target"]["scale"])


@pytest.mark.skipif(not REAL, reason="set OMNIDRAFT_ARM64_BUNDLES to run real bundles under emulation")
@pytest.mark.parametrize("bundle", REAL, ids=[p.name for p in REAL])
def test_real_bundle_on_arm64(bundle, tmp_path):
    _report(bundle, tmp_path, prompts=3, new_tokens=24)
