"""What one generation asks for, checked before it runs: its text and its settings.

`check_text` refuses text that is not valid Unicode; `generation_config` turns a request's settings
(length, sampling, seed, stop strings) into a GenerationConfig for a pair, each value with one clear
error; `whole_number` is the check the pair's options share.
"""

from __future__ import annotations

import math

from .errors import OmniDraftError
from .runtime.decoding import GenerationConfig
from .runtime.sampling import Sampler


def whole_number(name: str, value, least: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise OmniDraftError(f"{name} must be a whole number >= {least}, got {value!r}")


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def generation_config(pair, chat: bool, *, max_new_tokens: int = 64, temperature: float = 0.0,
                      top_p: float = 1.0, seed: int = 0, stop: str | list[str] | None = (),
                      strict_sampling: bool = False, sampled_drafts: bool = False, **fields) -> GenerationConfig:
    """A GenerationConfig for this pair (an opened pair.Pair: its resolved draft length, its end-of-turn ids with
    chat), every value checked with one clear error; `fields`: GenerationConfig's other fields."""
    whole_number("max_new_tokens", max_new_tokens, 1)
    if not _number(temperature) or not 0 <= temperature < math.inf:
        raise OmniDraftError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if not _number(top_p) or not 0 < top_p <= 1:
        raise OmniDraftError(f"top_p must be in (0, 1], got {top_p!r}")
    whole_number("seed", seed, 0)
    if stop is None:
        stop = ()
    if not isinstance(stop, (str, list, tuple)) or not all(isinstance(s, str) for s in ([stop] if isinstance(
            stop, str) else stop)):
        raise OmniDraftError(f"stop: a string, a list of strings or None, got {stop!r}")
    stops = (stop,) if isinstance(stop, str) else tuple(stop)
    draft = pair.draft.config_fields() if pair.draft else {}
    return GenerationConfig(max_new_tokens=max_new_tokens, sampler=Sampler(float(temperature), float(top_p)),
                            seed=seed, stop_strings=stops, strict_sampling=strict_sampling,
                            sampled_drafts=bool(sampled_drafts),
                            eos_ids=pair.eos_ids(chat), **{**draft, **fields})


def check_text(text: str, what: str) -> None:
    """One clear error for text that is not valid Unicode: a lone surrogate, as Python makes of a command-line
    byte that is not UTF-8 (e.g. --prompt $'abc\\xff')."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        bad = text[e.start]
        byte = f" (the byte 0x{ord(bad) - 0xDC00:02x})" if 0xDC80 <= ord(bad) <= 0xDCFF else ""
        raise OmniDraftError(f"{what} is not valid UTF-8 text: character {e.start} is a lone surrogate "
                             f"U+{ord(bad):04X}{byte}") from None
