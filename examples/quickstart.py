"""OmniDraft from Python: the default pair on eager PyTorch, a prompt, a streamed chat reply.

    .venv/bin/python examples/quickstart.py
    .venv/bin/python examples/quickstart.py --bundle ~/.cache/omnidraft/bundles/et-8da8w-d8da4w  # ExecuTorch
"""

import argparse

import omnidraft

ap = argparse.ArgumentParser()
ap.add_argument("--bundle", help="an exported ExecuTorch bundle (omnidraft export); default: eager PyTorch")
args = ap.parse_args()
options = {"backend": "executorch", "bundle": args.bundle} if args.bundle else {}

with omnidraft.load(**options) as m:  # what the pair learns is saved when the block ends
    r = m.generate("The three primary colours are", max_new_tokens=48)
    print(r.text)
    print(f"[{r.stats.tokens_per_s:.1f} tok/s, {r.stats.tokens_per_target_call:.2f} tokens per target call]")
    for piece in m.stream(messages=[{"role": "user", "content": "Write a haiku about the sea."}], max_new_tokens=48):
        print(piece, end="", flush=True)
    print(f"\n[stop: {m.last.stop_reason}]")
