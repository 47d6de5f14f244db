"""Desktop simulator: run an exported bundle on onnxruntime exactly as the phone app would.

Same bundle, same loop, no torch model in memory. Without --prompt it is an
interactive multi-turn chat in the terminal: text streams as it is accepted,
Ctrl-C ends the current turn (the partial reply is kept), an empty line or
Ctrl-D ends the session. After every turn a statistics line shows tokens/s,
tokens per target call, acceptance, n-gram cache size and resident memory.
With --report DIR: report.json plus PNG plots (acceptance and tokens/s over
time, accepted-length histogram).
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
    """A bundle on onnxruntime. With adapt, the drafter learns as on the phone: LoRA steps
    through the bundle's ExecuTorch training program, so the drafter runs its LoRA graph
    (drafter_lora.pte) on ExecuTorch while the target stays on onnxruntime."""

    def __init__(self, options):
        from .pair import open_pair

        self.pair = open_pair(options)
        self.turns: list[dict] = []
        self.rss_after_load = rss_mb()
        self.started = time.perf_counter()

    def reply(self, ids, config: GenerationConfig, write) -> dict:
        """Generate one reply, streaming it through write(piece, source); Ctrl-C stops it and keeps what was
        produced."""
        pieces: list[str] = []
        turn_start = time.perf_counter() - self.started
        done = []
        stream = self.pair.decoder.stream(ids, config, sources=True, done=done.append)
        try:
            for piece, source in stream:
                pieces.append(piece)
                write(piece, source)
            result = done[0]
            stats, text, stop = result.stats, result.text, result.stop_reason
        except KeyboardInterrupt:
            stats, text, stop = None, "".join(pieces), "interrupted"
        finally:
            stream.close()  # Ctrl-C while writing: the generation ends here (what it learned is kept)
        write("\n", "target")
        turn = {"start_s": turn_start, "text": text, "stop_reason": stop, "prompt_tokens": len(ids),
                "rss_mb": rss_mb(), "peak_rss_mb": peak_rss_mb()}
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
        return (
            f"[{turn['tokens_per_s']:.1f} tok/s | {turn['tokens_per_target_call']:.2f} tok/call | "
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
            "backend": Backend.ONNXRUNTIME,
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

    args.threads = opt.threads(args.threads)
    sim = Simulator(opt.pair_options(args, adapt=args.adapt, backend=Backend.ONNXRUNTIME,
                                     drafter_backend=Backend.EXECUTORCH if args.adapt else None))
    chat = args.chat or args.prompt is None
    write = opt.source_writer(args.show_sources, sys.stdout)

    def config():
        return opt.generation_config(args, sim.pair, chat)

    learning = f", drafter learning on ExecuTorch (profile {args.profile})" if args.adapt else ""
    proposing = {ProposerKind.HYBRID: f"lookup + {sim.pair.drafter_name}", ProposerKind.DRAFTER: sim.pair.drafter_name,
                 ProposerKind.LOOKUP: "lookup"}
    print(f"[simulator] {proposing[args.proposer]} -> {sim.pair.target_name} on onnxruntime{learning}, "
          f"threads {args.threads or 'default'}, RSS {sim.rss_after_load:.0f} MB after load", file=sys.stderr)
    if args.prompt is not None:
        ids = sim.pair.encode_prompt(args.prompt, chat=args.chat)
        print(sim.status_line(sim.reply(ids, config(), write)), file=sys.stderr)
    else:
        messages: list[dict] = []
        print("[simulator] chat: type a message; an empty line or Ctrl-D ends, Ctrl-C stops a reply", file=sys.stderr)
        while True:
            try:
                line = input("you> ")
            except (EOFError, KeyboardInterrupt):
                print(file=sys.stderr)
                break
            if not line.strip():
                break
            messages.append({"role": "user", "content": line})
            ids = sim.pair.encode_chat(messages)
            if len(ids) >= sim.pair.decoder.target.max_context:
                raise OmniDraftError("the conversation no longer fits the bundle's context window; start a new session")
            sys.stdout.write("model> ")
            turn = sim.reply(ids, config(), write)
            messages.append({"role": "assistant", "content": turn["text"]})
            print(sim.status_line(turn), file=sys.stderr)
    if args.report:
        print(f"[simulator] report written to {sim.report(args.report)}", file=sys.stderr)
    return 0
