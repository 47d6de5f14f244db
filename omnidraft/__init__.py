"""OmniDraft: cross-vocabulary, online-adaptive speculative decoding for on-device LLMs."""

from .version import __version__  # noqa: F401 (the package's version)


def load(**options):
    """Open a target and drafter pair: omnidraft.load(backend="executorch", bundle=DIR), or load() for the
    default pair on eager PyTorch (omnidraft/api.py)."""
    from .api import load as _load

    return _load(**options)
