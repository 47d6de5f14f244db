"""What the product does, in one short session: a pasted text and requests about it, two turns of a chat that
keeps its cache, decoded by the target alone and by the default (lookup + the drafter), side by side.

    .venv/bin/python examples/demo.py        # make demo
    .venv/bin/python examples/demo.py --bundle ~/.cache/omnidraft/bundles/et-8da8w-d8da4w   # on ExecuTorch

Greedy, so the two replies must be the same text token for token; the demo says whether they are.
"""

import argparse
import sys
import time

import omnidraft

PASTED = """\
The Python tutorial says: Python is an easy to learn, powerful programming language. It has efficient
high-level data structures and a simple but effective approach to object-oriented programming. Python's
elegant syntax and dynamic typing, together with its interpreted nature, make it an ideal language for
scripting and rapid application development in many areas on most platforms. The Python interpreter and
the extensive standard library are freely available in source or binary form for all major platforms
from the Python web site, and may be freely distributed."""
TURNS = [f"{PASTED}\n\nCopy the paragraph above word for word.", "Now copy its second sentence once more."]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", help="an exported ExecuTorch bundle; default: eager PyTorch")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    options = {"backend": "executorch", "bundle": args.bundle} if args.bundle else {}
    print("[demo] loading the default pair (the first run prepares the models, with progress)", file=sys.stderr)
    with omnidraft.load(threads=args.threads, **options) as m:
        chats = {"target alone": m.chat(), "default": m.chat()}  # two conversations on one pair, in turns
        all_same = True
        for i, message in enumerate(TURNS, 1):
            replies = {}
            for name, chat in chats.items():
                t0 = time.perf_counter()
                r = chat.send(message, max_new_tokens=args.max_new_tokens, speculative=name == "default")
                replies[name] = (r, time.perf_counter() - t0)
            (base, _), (fast, _) = replies["target alone"], replies["default"]
            same = base.token_ids == fast.token_ids
            all_same &= same
            print(f"\n--- turn {i}: {message.splitlines()[-1]}\n{fast.text.strip()}\n")
            print(f"[turn {i}] target alone {base.stats.tokens_per_s:.1f} tok/s | default "
                  f"{fast.stats.tokens_per_s:.1f} tok/s ({fast.stats.tokens_per_target_call:.2f} tokens per target "
                  f"call) | {fast.stats.tokens_per_s / base.stats.tokens_per_s:.2f}x | "
                  f"{'identical' if same else 'DIFFERENT'} | prompt tokens read {fast.stats.prompt_tokens - fast.stats.prompt_tokens_reused}"
                  f" of {fast.stats.prompt_tokens}")
        print("\n[demo] every reply identical to the target's own" if all_same else "\n[demo] replies DIFFER")
    return 0 if all_same else 1


if __name__ == "__main__":
    raise SystemExit(main())
