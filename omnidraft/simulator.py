"""Desktop simulator: run an exported bundle exactly as the phone app would.

Same bundle, same loop, no torch model in memory: on ExecuTorch when the bundle has its programs (the
phone's runtime, the default), else on onnxruntime (--backend picks). Without --prompt it is a
multi-turn chat session (omnidraft/session.py): each turn reads only the new message into the
target's cache, and when the conversation outgrows the window the oldest turns are dropped (the
statistics line says so), never a dead end. Interactive in the terminal (text streams as it is
accepted, Ctrl-C ends the current turn (its partial reply is shown, not kept in the conversation), an
empty line or Ctrl-D ends the session), or scripted (--script FILE: one message per line, each turn's time to first token and
speed reported). After every turn a statistics line shows tokens/s, tokens per target call,
acceptance, n-gram cache size and resident memory. With --report DIR: report.json plus PNG plots
(acceptance and tokens/s over time, accepted-length histogram).
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

from .atomic import write_bytes_atomic
from .errors import OmniDraftError
from .runtime.choices import Backend, ProposerKind
from .runtime.decoding import GenerationConfig


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


class Simulator:
    """A bundle on ExecuTorch or onnxruntime. With adapt, the drafter learns as on the phone: LoRA steps
    through the bundle's ExecuTorch training program, so the drafter runs its LoRA graph
    (drafter_lora.pte) on ExecuTorch whatever the target runs on."""

    def __init__(self, options, system: str | None = None):
        from .pair import open_pair
        from .session import Chat

        self.pair = open_pair(options)
        self.chat = Chat(self.pair, system)
        self.turns: list[dict] = []
        self.rss_after_load = rss_mb()
        self.started = time.perf_counter()

    def say(self, message: str, fields: dict, write) -> dict:
        """One chat turn: the reply to `message`, kept in the conversation (session.py). fields: the generation's
        options (max_new_tokens, sampling)."""
        ids, _ = self.chat.prompt(message, fields["max_new_tokens"])
        return self._reply(self.chat.stream(message, sources=True, **fields), write, len(ids))

    def once(self, ids, config: GenerationConfig, write) -> dict:
        """One prompt, outside any conversation."""
        return self._reply(self.pair.decoder.stream(ids, config, sources=True), write, len(ids))

    def _reply(self, stream, write, prompt_tokens: int) -> dict:
        """Stream one reply through write(piece, source); Ctrl-C stops it and keeps what was produced."""
        pieces: list[str] = []
        turn_start = time.perf_counter() - self.started
        first = result = None
        try:
            while True:
                try:
                    piece, source = next(stream)
                except StopIteration as stop:  # the generation's result
                    result = stop.value
                    break
                if first is None:
                    first = time.perf_counter() - self.started - turn_start
                pieces.append(piece)
                write(piece, source)
        except KeyboardInterrupt:
            pass
        finally:
            stream.close()  # Ctrl-C while writing: the generation ends here (what it learned is kept)
        write("\n", "target")
        stats = result.stats if result is not None else None
        turn = {"start_s": turn_start, "text": result.text if result else "".join(pieces),
                "stop_reason": result.stop_reason if result else "interrupted", "prompt_tokens": prompt_tokens,
                "time_to_first_piece_s": first, "rss_mb": rss_mb(), "peak_rss_mb": peak_rss_mb()}
        if stats:
            from .options import proposal_summary, timing_parts

            turn.update(stats.to_json())
            turn["rounds"] = stats.rounds
            turn["summary"] = {"proposals": proposal_summary(stats), "timings": timing_parts(stats)}
        self.turns.append(turn)
        self.pair.save_cache()
        return turn

    def status_line(self, turn: dict) -> str:
        if "tokens_per_s" not in turn:
            return f"[turn interrupted | RSS {turn['rss_mb']:.0f} MB]"
        cache = self.pair.ngram_cache
        adapted = turn.get("adaptation")
        lora = f" | LoRA updates {adapted['updates']} ({adapted['rollbacks']} rolled back)" if adapted else ""
        summary = turn["summary"]
        moved = (f"window moved: {turn['dropped_turns']} oldest turn(s) dropped, the rest read again | "
                 if turn.get("dropped_turns") else "")
        first = turn.get("time_to_first_piece_s")
        return (
            f"[{moved}{turn['tokens_per_s']:.1f} tok/s | {turn['tokens_per_target_call']:.2f} tok/call | "
            + (f"first text after {first:.2f}s ({turn['prompt_tokens'] - turn['prompt_tokens_reused']} new "
               f"prompt tokens read) | " if first is not None else "") +
            f"acceptance {turn['acceptance_rate']:.2f} ({summary['proposals']}) | "
            + "".join(f"{t} | " for t in summary["timings"]) +
            f"n-gram cache {len(cache) if cache else 0}{lora} | "
            f"RSS {turn['rss_mb']:.0f} MB (peak {turn['peak_rss_mb']:.0f})]"
        )

    def report(self, out_dir: Path) -> Path:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        summary = {
            "bundle": str(self.pair.bundle.root),
            "target": self.pair.target_name,
            "drafter": self.pair.drafter_name,
            "backend": self.pair.decoder.target.backend,
            "drafter_backend": self.pair.drafter.backend if self.pair.drafter else None,
            "adapter": str(self.pair.adapter_path) if self.pair.adapter_path else None,
            "rss_after_load_mb": self.rss_after_load,
            "rss_steady_mb": rss_mb(),
            "peak_rss_mb": peak_rss_mb(),
            "turns": self.turns,
        }
        write_bytes_atomic(out_dir / "report.json", json.dumps(summary, indent=1, ensure_ascii=False).encode())
        _plots(self.turns, out_dir)
        return out_dir


def _plots(turns: list[dict], out_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t, acc, tps, lengths = [], [], [], []
    for turn in turns:
        prev = 0.0
        for sec, proposed, accepted in turn.get("rounds", []):
            t.append(turn["start_s"] + sec)
            acc.append(accepted / proposed if proposed else float("nan"))
            tps.append((accepted + 1) / max(sec - prev, 1e-6))
            lengths.append(accepted)
            prev = sec
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    axes[0].plot(t, acc, ".", alpha=0.4)
    axes[0].set(title="acceptance per round", xlabel="session time (s)", ylabel="accepted / proposed", ylim=(-0.05, 1.05))
    axes[1].plot(t, tps, ".", alpha=0.4)
    axes[1].set(title="tokens/s per round", xlabel="session time (s)", ylabel="tokens/s")
    axes[2].hist(lengths, bins=range(0, max(lengths, default=0) + 2), align="left", rwidth=0.8)
    axes[2].set(title="accepted length per round", xlabel="accepted proposals", ylabel="rounds")
    fig.tight_layout()
    fig.savefig(out_dir / "simulator.png", dpi=90)
    plt.close(fig)


def run(args) -> int:
    from . import options as opt
    from .bundle import load_bundle

    args.threads = opt.threads(args.threads)
    backend = args.backend or (Backend.EXECUTORCH if "executorch" in load_bundle(
        args.bundle, verify_hashes=False).model("target").graphs else Backend.ONNXRUNTIME)
    sim = Simulator(opt.pair_options(args, adapt=args.adapt, backend=backend,
                                     drafter_backend=Backend.EXECUTORCH if args.adapt else None), args.system)
    chat = args.chat or args.prompt is None
    write = opt.source_writer(args.show_sources, sys.stdout)
    fields = {"max_new_tokens": args.max_new_tokens, "temperature": args.temperature, "top_p": args.top_p,
              "seed": args.seed, "strict_sampling": args.strict_sampling, "sampled_drafts": args.sampled_drafts}

    learning = f", drafter learning on ExecuTorch (profile {args.profile})" if args.adapt else ""
    proposing = {ProposerKind.HYBRID: f"lookup + {sim.pair.drafter_name}", ProposerKind.DRAFTER: sim.pair.drafter_name,
                 ProposerKind.LOOKUP: "lookup"}
    window = sim.pair.decoder.target.max_context
    print(f"[simulator] {proposing[args.proposer]} -> {sim.pair.target_name} on {backend} (window {window}){learning}, "
          f"threads {args.threads or 'default'}, RSS {sim.rss_after_load:.0f} MB after load", file=sys.stderr)
    if args.prompt is not None:
        ids = sim.pair.encode_prompt(args.prompt, chat=args.chat)
        print(sim.status_line(sim.once(ids, opt.generation_config(args, sim.pair, chat), write)), file=sys.stderr)
    elif args.script is not None:
        for i, message in enumerate(read_script(args.script)):
            sys.stdout.write(f"you> {message}\nmodel> ")
            print(f"[turn {i + 1}] " + sim.status_line(sim.say(message, fields, write)), file=sys.stderr)
    else:
        print("[simulator] chat: type a message; an empty line or Ctrl-D ends, Ctrl-C stops a reply", file=sys.stderr)
        while True:
            try:
                line = input("you> ")
            except (EOFError, KeyboardInterrupt):
                print(file=sys.stderr)
                break
            if not line.strip():
                break
            sys.stdout.write("model> ")
            print(sim.status_line(sim.say(line, fields, write)), file=sys.stderr)
    if args.report:
        print(f"[simulator] report written to {sim.report(args.report)}", file=sys.stderr)
    return 0


def read_script(path: Path) -> list[str]:
    """A scripted chat: one message per non-empty line of a UTF-8 file."""
    from .options import read_text

    text = read_text(path, "script file")
    messages = [line.strip() for line in text.splitlines() if line.strip()]
    if not messages:
        raise OmniDraftError(f"script file {path} holds no message")
    return messages
