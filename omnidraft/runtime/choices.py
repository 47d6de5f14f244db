"""The closed choices a user makes, as string enums: where each option runs, who proposes, how many tokens to
draft. A member equals its string ("eager" == Backend.EAGER), so options, JSON reports and bundle manifests keep
their plain names; code compares against members, never against spelled-out strings."""

from __future__ import annotations

from enum import StrEnum


class Backend(StrEnum):
    """Which runtime runs the models: PyTorch eager (checkpoint folders) or an exported bundle's graphs."""

    EAGER = "eager"
    EXECUTORCH = "executorch"
    ONNXRUNTIME = "onnxruntime"


class ProposerKind(StrEnum):
    """Who proposes tokens each round: the hybrid policy, the drafter alone, or lookup alone."""

    HYBRID = "hybrid"
    DRAFTER = "drafter"
    LOOKUP = "lookup"


class DraftPolicy(StrEnum):
    """How many tokens the drafter drafts per round (draft_length.py)."""

    FIXED = "fixed"
    HEURISTIC = "heuristic"
    AUTO = "auto"
