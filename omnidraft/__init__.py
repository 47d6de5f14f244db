"""OmniDraft: cross-vocabulary, online-adaptive speculative decoding for on-device LLMs."""

__version__ = "0.1.0"
