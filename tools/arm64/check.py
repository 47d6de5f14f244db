"""Run a bundle's ExecuTorch programs and record what they compute: the same script on x86 and on arm64.

    python tools/arm64/check.py --bundle DIR --out DIR [--prompts 3] [--new-tokens 24]
    python tools/arm64/env.py run -- tools/arm64/check.py --bundle DIR --out DIR   # under emulation

Writes into --out:
  - result.json: the machine, every program's methods (each loaded), per prompt the target's
    own greedy tokens and the speculative greedy tokens (model drafter, 4 drafts per round);
  - logits-<role>.npy: the logits at each of the prompts' first 64 tokens, fed 8 per call;
  - etdump-<role>.etdp: ExecuTorch's event trace of one 4-token and one 1-token call (which
    operators ran, delegated to XNNPACK or on portable kernels), read on the host by test_arm64.py.
Learned state goes to a fresh $OMNIDRAFT_HOME inside --out: both machines start alike.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

PROMPTS = [
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "The three most important things to know about the ocean are",
    "Q: What is the capital of France?\nA:",
    "Once upon a time, in a small village by the sea,",
]
TEXT_TOKENS = 64  # logits recorded over the prompts' first tokens, fed 8 at a time
FIXED_IDS = list(range(1000, 1020))  # for the event trace: ids every vocabulary here has


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--prompts", type=int, default=3, help=f"how many of the {len(PROMPTS)} prompts")
    ap.add_argument("--new-tokens", type=int, default=24)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ["OMNIDRAFT_HOME"] = str(args.out / "home")
    import numpy as np
    import torch

    from omnidraft.bundle import load_bundle
    from omnidraft.errors import OmniDraftError
    from omnidraft.models import load_tokenizer
    from omnidraft.pair import build_bundle_pair, open_runner
    from omnidraft.progress import stage
    from omnidraft.runtime.decoding import GenerationConfig, SpeculativeDecoder
    from omnidraft.runtime.executorch_runner import load_custom_ops

    torch.set_num_threads(args.threads)
    try:
        bundle = load_bundle(args.bundle, verify_hashes=False)  # hashing 0.5 GB under emulation is slow
    except OmniDraftError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    result = {"machine": platform.machine(), "bundle": str(args.bundle), "quant": bundle.manifest.quant,
              "programs": {}, "prompts": []}
    with stage(f"{platform.machine()}: loading every program"):
        result["programs"] = load_programs(bundle)
    text = "".join(PROMPTS)
    for role in ("target", "drafter"):
        with stage(f"{platform.machine()}: {role} logits and event trace"):
            load_custom_ops(bundle.model(role).executorch_ops)
            runner = open_runner(bundle, role, "executorch", args.threads)
            ids = np.array(load_tokenizer(bundle.tokenizer_dir(role)).encode(text)[:TEXT_TOKENS])
            chunks = [runner.forward(ids[i:i + 8], i, len(ids[i:i + 8])) for i in range(0, len(ids), 8)]
            np.save(args.out / f"logits-{role}.npy", np.concatenate(chunks))
            trace(bundle, role, args.out / f"etdump-{role}.etdp")
    pair = build_bundle_pair(args.bundle, "executorch", threads=args.threads, use_ngram_cache=False, use_history=False,
                             verify_hashes=False)
    target_only = SpeculativeDecoder(pair.decoder.target, pair.target_vocab)
    for text in PROMPTS[:args.prompts]:
        with stage(f"{platform.machine()}: greedy decoding, {args.new_tokens} tokens: {text[:30]!r}"):
            ids = pair.encode_prompt(text)
            start = time.perf_counter()
            base = target_only.generate(ids, GenerationConfig(max_new_tokens=args.new_tokens, speculative=False))
            spec = pair.decoder.generate(ids, GenerationConfig(max_new_tokens=args.new_tokens, draft_len=4))
            result["prompts"].append({"prompt": text, "target_only": base.token_ids, "speculative": spec.token_ids,
                                      "drafted": spec.stats.drafted, "seconds": time.perf_counter() - start})
    (args.out / "result.json").write_text(json.dumps(result, indent=1))
    return 0


def load_programs(bundle) -> dict:
    """Every ExecuTorch program the bundle ships, each method loaded: {file: [methods]}."""
    from executorch.runtime import Runtime

    files = {rel for role in ("target", "drafter") for key, rel in bundle.model(role).graphs.items()
             if key.startswith("executorch")}
    files |= {rel for rel in bundle.manifest.files if rel.endswith(".pte")}
    for role in ("target", "drafter"):
        from omnidraft.runtime.executorch_runner import load_custom_ops

        load_custom_ops(bundle.model(role).executorch_ops)
    loaded = {}
    for rel in sorted(files):
        program = Runtime.get().load_program(str(bundle.root / rel))
        loaded[rel] = sorted(program.method_names)
        for name in loaded[rel]:
            program.load_method(name)
    return loaded


def trace(bundle, role: str, path: Path) -> None:
    """An ETDump of one 4-token and one 1-token call of the role's decoding program."""
    import torch
    from executorch.runtime import Runtime

    entry = bundle.model(role)
    program = Runtime.get().load_program(str(bundle.graph_path(role, "executorch")), enable_etdump=True)
    method = program.load_method("forward")
    head = [torch.zeros(int(entry.acceptance_head["features"])), torch.zeros(1)] if entry.acceptance_head else []
    ids = torch.tensor([FIXED_IDS])
    method.execute([ids[:, :4], torch.arange(4).unsqueeze(0), *head])
    method.execute([ids[:, 4:5], torch.tensor([[4]]), *head])
    program.write_etdump_result_to_file(str(path), str(path.with_suffix(".debug")))


if __name__ == "__main__":
    sys.exit(main())
