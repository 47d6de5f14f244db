"""Plots for the README from the benchmark results folders (no measuring here).

    .venv/bin/python benchmarks/plot.py   # reads benchmarks/results/*/results.json, writes benchmarks/results/*.png
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def load(name: str) -> dict | None:
    path = RESULTS / name / "results.json"
    return json.loads(path.read_text()) if path.exists() else None


def main() -> None:
    backends, peers = load("backends"), load("peers")
    cores = {name: load(name) for name in ("core_pair", "core_pair_4l")}
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.5))
    if backends:
        rows = backends["rows"]
        names = [r["config"] for r in rows]
        x = range(len(rows))
        axes[0].bar([i - 0.2 for i in x], [r["target_only_tokens_per_s"] for r in rows], 0.4, label="target-only")
        axes[0].bar([i + 0.2 for i in x], [r["spec_tokens_per_s"] for r in rows], 0.4, label="speculative")
        axes[0].set_xticks(list(x), names, rotation=20, ha="right")
        axes[0].set(title=f"backends ({backends['threads']} threads, greedy)", ylabel="tokens/s")
        axes[0].legend()
    if peers:
        rows = peers["rows"]
        axes[1].barh([r["method"] for r in rows], [r["speedup"] for r in rows], color="tab:green")
        axes[1].axvline(1.0, color="black", lw=0.8)
        axes[1].set(title="vs target-only, eager fp32", xlabel="speedup (x)")
    for label, res in cores.items():
        if res:
            domains = [r["domain"] for r in res["rows"]]
            c = f" (c={res['cost_ratio_c']:.2f})" if "cost_ratio_c" in res else ""
            axes[2].plot(domains, [r["tokens_per_target_call"] for r in res["rows"]], "o-", label=res["drafter"] + c)
    axes[2].set(title="tokens per target call (k=4)", ylabel="tokens / target call", ylim=(0.8, None))
    axes[2].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "summary.png", dpi=90)
    print(RESULTS / "summary.png")
    plot_adaptation([r for r in (load("adaptation_code"), load("adaptation_prose_chat")) if r])


def plot_adaptation(results: list[dict]) -> None:
    """Acceptance per window of the stream, one panel per domain, one line per configuration."""
    runs = [run for r in results for run in r["runs"]]
    domains = list(dict.fromkeys(run["domain"] for run in runs))
    if not domains:
        return
    fig, axes = plt.subplots(1, len(domains), figsize=(5.5 * len(domains), 4), squeeze=False)
    for ax, domain in zip(axes[0], domains):
        for run in (run for run in runs if run["domain"] == domain):
            acc = [w["acceptance_rate"] for w in run["windows"]]
            line, = ax.plot(range(1, len(acc) + 1), acc, "o-", label=run["config"])
            ax.axhline(run["heldout"]["acceptance_rate"], color=line.get_color(), ls=":", lw=1)
            ax.set_xticks(range(1, len(acc) + 1))
        window = results[0]["window"]
        ax.set(title=f"{domain} (dotted: held-out after the stream)", xlabel=f"window of {window} prompts",
               ylabel="acceptance")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "adaptation.png", dpi=90)
    print(RESULTS / "adaptation.png")


if __name__ == "__main__":
    main()
