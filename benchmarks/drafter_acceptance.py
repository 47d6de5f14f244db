"""Held-out greedy acceptance of drafters against the target, per domain, teacher-forced.

The target writes greedy continuations of held-out prompts (the corpora's eval split);
each drafter reads the same text through the bridge, as at decoding time (its prompt
is the bridge's draft prompt, every committed target token spelled in draft tokens),
and a target token counts as accepted when the drafter's greedy choices (through its
draft head, if it has one) reproduce its whole spelling. That is the per-token
acceptance of greedy speculative decoding, without running the decoder: one drafter
pass per continuation, so drafters compare side by side on identical text.

    python benchmarks/drafter_acceptance.py --drafter full=smollm2-135m-instruct \\
        --drafter small=~/.cache/omnidraft/models/omnidraft-small --prompts 16 --out benchmarks/results/drafter_acceptance
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import save_results  # noqa: E402

from omnidraft import corpora  # noqa: E402
from omnidraft.atomic import write_bytes_atomic  # noqa: E402
from omnidraft.adaptation.examples import ExampleBuilder, Mapping, unit_hits  # noqa: E402
from omnidraft.draft_head import apply_draft_head  # noqa: E402
from omnidraft.models import DEFAULT_DRAFTER, DEFAULT_TARGET, load_model, load_tokenizer, load_vocab  # noqa: E402
from omnidraft.catalog import resolve_model_path  # noqa: E402
from omnidraft.progress import log  # noqa: E402
from omnidraft.runtime.bridge import VocabBridge  # noqa: E402


def continuations(target, tokenizer, domain: str, n: int, new_tokens: int) -> list[tuple[list[int], list[int]]]:
    """(prompt, greedy continuation) in target tokens, one prompt at a time (no padding)."""
    out = []
    for text in corpora.prompts(domain, n, seed=0, split="eval"):
        prompt = tokenizer.encode(text)
        ids = torch.tensor([prompt])
        with torch.no_grad():
            full = target.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                   do_sample=False)
        out.append((prompt, full[0, len(prompt):].tolist()))
    return out


def acceptance(model, bridge, texts) -> tuple[int, int]:
    """(accepted target tokens, target tokens) over the continuations."""
    mapping = Mapping.from_bridge(bridge)
    hits = units = 0
    for prompt, continuation in texts:
        builder = ExampleBuilder(bridge, mapping, bridge.draft_prompt(prompt))
        builder.add(continuation, np.zeros((len(continuation), len(mapping)), np.float32), over_mapping=True)
        example = builder.build()
        if example is None:
            continue
        with torch.no_grad():
            choice = model(input_ids=torch.from_numpy(example.ids)[None]).logits[0].argmax(-1).numpy()
        hits += unit_hits(example, choice)
        units += len(example.units)
    return hits, units


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drafter", action="append", required=True, help="NAME=PATH (or NAME=smollm2-135m-instruct)")
    ap.add_argument("--target", default=None)
    ap.add_argument("--domains", default="code,prose,chat")
    ap.add_argument("--prompts", type=int, default=16, help="held-out prompts per domain")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target_path = resolve_model_path(args.target, DEFAULT_TARGET)
    target, tokenizer = load_model(target_path), load_tokenizer(target_path)
    domains = [d.strip() for d in args.domains.split(",")]
    started = time.perf_counter()
    key = {"target": str(target_path), "prompts": args.prompts, "new_tokens": args.new_tokens}
    saved = args.out / "continuations.json"  # the target's text, kept so drafters can be added later
    texts = json.loads(saved.read_text()) if saved.exists() else {}
    if texts.get("key") != key:
        texts = {"key": key}
    for domain in domains:
        if domain not in texts:
            log(f"[bench] the target continues {args.prompts} held-out {domain} prompts ({args.new_tokens} tokens)")
            texts[domain] = continuations(target, tokenizer, domain, args.prompts, args.new_tokens)
            args.out.mkdir(parents=True, exist_ok=True)
            write_bytes_atomic(saved, json.dumps(texts).encode())
    rows = []
    for spec in args.drafter:
        name, _, path = spec.partition("=")
        path = resolve_model_path(path or None, DEFAULT_DRAFTER)
        model = load_model(path)
        head = apply_draft_head(model, path)
        bridge = VocabBridge(load_vocab(path), load_vocab(target_path))
        row = {"drafter": name, "path": str(path), "layers": model.config.num_hidden_layers, "head": head}
        total_h = total_u = 0
        for domain in domains:
            h, u = acceptance(model, bridge, texts[domain])
            row[domain] = h / max(1, u)
            total_h, total_u = total_h + h, total_u + u
        row["all"] = total_h / max(1, total_u)
        row["tokens"] = total_u
        rows.append(row)
        log(f"[bench] {name}: " + ", ".join(f"{d} {row[d]:.3f}" for d in domains + ["all"]))
    result = {"command": " ".join(sys.argv), "threads": args.threads, "target": str(target_path),
              "prompts": args.prompts, "new_tokens": args.new_tokens, "domains": domains, "rows": rows,
              "seconds": round(time.perf_counter() - started, 1)}
    save_results(args.out, result, render)


def render(result: dict) -> str:
    domains = result["domains"]
    lines = [f"Held-out greedy acceptance per target token, teacher-forced ({result['prompts']} prompts per domain, "
             f"{result['new_tokens']} target tokens each, eval split)", "",
             "| drafter | layers | draft head | " + " | ".join(domains) + " | all |",
             "|---|---|---|" + "---|" * (len(domains) + 1)]
    for r in result["rows"]:
        lines.append(f"| {r['drafter']} | {r['layers']} | {r['head'] or 'full'} | "
                     + " | ".join(f"{r[d]:.3f}" for d in domains) + f" | {r['all']:.3f} |")
    lines += ["", f"Command: `{result['command']}`", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
