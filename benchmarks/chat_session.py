"""A long scripted chat on the bundle's ExecuTorch programs: per turn, the time to the first token and the speed.

    .venv/bin/python benchmarks/chat_session.py --bundle ~/.cache/omnidraft/bundles/et-8da8w-d8da4w \\
        --turns 30 --threads 2 --out benchmarks/results/chat_session

A chat session (omnidraft/session.py) as the simulator holds it: the first message pastes a long text (a
standard-library module's documentation, about 1,500 tokens) with a question, the next ones ask about it
and now and then paste more, each reply up to --max-new-tokens. Two sessions on two copies of the pair,
turn by turn: the target alone and the default (lookup + the drafter, learned state empty at the start),
greedy, so their replies must be the same. Per turn: prompt tokens read (what the cache did not hold),
time to the first token (reading them and the first step), decode tokens per second, and the turns the
window dropped. The aim: no turn errs, and every turn's time to first token stays within twice the
median's, apart from the turns that move the window.
"""

from __future__ import annotations

import argparse
import os
import pydoc
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from omnidraft.pair import PairOptions, open_pair
from omnidraft.runtime.choices import Backend, ProposerKind
from omnidraft.session import Chat
from omnidraft.state import omnidraft_home

sys.path.insert(0, str(Path(__file__).parent))
from common import save_results  # noqa: E402

FOLLOW_UPS = ["What is the first function it describes?", "Quote its first sentence.", "Summarize that in one line.",
              "Which arguments does it take?", "Give an example call.", "What does it return?",
              "Quote the paragraph about errors, if there is one.", "Repeat your last answer.",
              "What else is in the text?", "List three names it mentions."]
PASTES = ("textwrap", "shlex", "fnmatch", "glob", "bisect")


def doc_text(module: str, chars: int) -> str:
    return pydoc.render_doc(module, renderer=pydoc.plaintext)[:chars]


def script(turns: int) -> list[str]:
    out = [f"{doc_text('string', 6000)}\n\nWhat is this text about?"]
    for i in range(1, turns):
        if i % 7 == 0:  # now and then a new text to ask about
            out.append(f"{doc_text(PASTES[(i // 7) % len(PASTES)], 1500)}\n\nAnd this one: what does it describe?")
        else:
            out.append(FOLLOW_UPS[i % len(FOLLOW_UPS)])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if args.turns < 1 or args.max_new_tokens < 1 or args.threads < 1:
        ap.error("--turns, --max-new-tokens and --threads must be at least 1")
    torch.set_num_threads(args.threads)
    home = omnidraft_home()
    rows = []
    with tempfile.TemporaryDirectory() as state:
        os.environ["OMNIDRAFT_HOME"] = state
        (Path(state) / "models").symlink_to(home / "models", target_is_directory=True)
        chats = {"target alone": Chat(open_pair(PairOptions(backend=Backend.EXECUTORCH, bundle=args.bundle,
                                                            speculative=False, threads=args.threads))),
                 "default": Chat(open_pair(PairOptions(backend=Backend.EXECUTORCH, bundle=args.bundle,
                                                       proposer=ProposerKind.HYBRID, threads=args.threads)))}
        for i, message in enumerate(script(args.turns), 1):
            replies = {}
            for name, chat in chats.items():
                r = chat.send(message, max_new_tokens=args.max_new_tokens)
                s = r.stats
                replies[name] = r.token_ids
                rows.append({"turn": i, "method": name, "prompt_tokens": s.prompt_tokens,
                             "read": s.prompt_tokens - s.prompt_tokens_reused, "dropped_turns": s.dropped_turns,
                             "time_to_first_token_s": s.prefill_s + (s.timings.target_step_ms or 0) / 1000,
                             "tokens_per_s": s.tokens_per_s, "new_tokens": s.new_tokens,
                             "tokens_per_target_call": s.tokens_per_target_call})
                print(f"[chat] turn {i} {name}: read {rows[-1]['read']} of {s.prompt_tokens}, first token "
                      f"{rows[-1]['time_to_first_token_s']:.2f}s, {s.tokens_per_s:.1f} tok/s"
                      + (f", dropped {s.dropped_turns} turns" if s.dropped_turns else ""), file=sys.stderr)
            rows[-1]["identical"] = replies["default"] == replies["target alone"]
    summary = {}
    for name in chats:
        mine = [r for r in rows if r["method"] == name]
        ttft = [r["time_to_first_token_s"] for r in mine]
        median = statistics.median(ttft)
        shifts = [r["turn"] for r in mine if r["dropped_turns"]]
        outliers = [r["turn"] for r in mine if r["time_to_first_token_s"] > 2 * median and r["turn"] not in shifts]
        summary[name] = {"median_ttft_s": median, "max_ttft_s": max(ttft), "window_moves": shifts,
                         "ttft_over_twice_median_not_moving": outliers,
                         "median_tokens_per_s": statistics.median(r["tokens_per_s"] for r in mine)}
    result = {"date": time.strftime("%Y-%m-%d"), "threads": args.threads, "bundle": args.bundle.name,
              "turns": args.turns, "max_new_tokens": args.max_new_tokens, "rows": rows, "summary": summary,
              "identical": all(r.get("identical", True) for r in rows),
              "command": "benchmarks/chat_session.py " + " ".join(sys.argv[1:])}
    save_results(args.out, result, render)
    return 0


def render(r: dict) -> str:
    lines = [f"A {r['turns']}-turn scripted chat on {r['bundle']} (ExecuTorch), up to {r['max_new_tokens']} new tokens a "
             f"turn, greedy, {r['threads']} threads, {r['date']}; every default reply identical to the target alone's: "
             f"{'yes' if r['identical'] else 'NO'}. Command: `{r['command']}`.", "",
             "| method | median time to first token | slowest | turns over twice the median (not moving the window) "
             "| window moved at turns | median decode tok/s |", "|---|---|---|---|---|---|"]
    for name, s in r["summary"].items():
        lines.append(f"| {name} | {s['median_ttft_s']:.2f} s | {s['max_ttft_s']:.2f} s | "
                     f"{s['ttft_over_twice_median_not_moving'] or 'none'} | {s['window_moves'] or 'never'} | "
                     f"{s['median_tokens_per_s']:.1f} |")
    lines += ["", "| turn | method | prompt tokens | read | first token | tok/s | tokens/call | dropped turns |",
              "|---|---|---|---|---|---|---|---|"]
    for row in r["rows"]:
        lines.append(f"| {row['turn']} | {row['method']} | {row['prompt_tokens']} | {row['read']} | "
                     f"{row['time_to_first_token_s']:.2f} s | {row['tokens_per_s']:.1f} | "
                     f"{row['tokens_per_target_call']:.2f} | {row['dropped_turns']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
