"""The lean ExecuTorch decoding graph: ExecuTorch's LLM custom ops behind transformers' attention.

Lowered as written, a transformers model with a static cache leaves portable work
between its XNNPACK partitions at every step: the cache write (`index_put`, `copy_`),
the causal mask (`where`, `mul`) and, with grouped KV heads, `expand_copy` repeating the
KV heads over the whole cache. The executorch wheel ships two operators that remove it
(`executorch.extension.llm.custom_ops`, as ExecuTorch's llama example and
optimum-executorch use them):

  - `llama::update_cache(new, cache, start)` writes the new positions in place;
  - `llama::custom_sdpa(q, k_cache, v_cache, start, mask, 0, causal, scale)` maps each
    query head to its KV head by index and, when causal, reads only the first
    `start + n` cache positions.

Both take [batch, seq, heads, dim]; the cache buffers use that layout. The graph
contract is the plain graph's: tokens and their positions in, the cache written at
those positions, later positions never read, so a rollback is an overwrite.

Sliding-window layers (Gemma-3) keep a full-length cache like every other layer (a
rollback never needs states the window dropped). Where the cache is longer than the
window they pass an explicit mask (causal and windowed; custom_sdpa then scans the
whole cache); otherwise the window never binds and the layer is plain causal.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, StaticLayer

ATTENTION = "omnidraft_llama_ops"


def register() -> str:
    """Load the custom ops and register them as a transformers attention implementation; its name."""
    from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401 - registers torch.ops.llama
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTENTION, _attention)
    AttentionMaskInterface.register(ATTENTION, _no_mask)  # custom_sdpa masks by position itself
    return ATTENTION


def _no_mask(*args, **kwargs):
    return None


def _attention(module, query, key, value, attention_mask, scaling=None, sliding_window=None, dropout=0.0,
               cache_start=None, **kwargs):
    """Attention of `query` [1, heads, n, dim] over a layer's whole cache `key`/`value` [1, length, kv_heads, dim]."""
    q = query.transpose(1, 2)
    n, length = q.shape[1], key.shape[1]
    if sliding_window and sliding_window < length:
        mask = window_mask(cache_start, n, length, sliding_window)
        out = torch.ops.llama.custom_sdpa(q, key, value, cache_start, mask, 0.0, False, scaling)
    else:
        out = torch.ops.llama.custom_sdpa(q, key, value, cache_start, None, 0.0, True, scaling)
    return out, None


def window_mask(start, n: int, length: int, window: int) -> torch.Tensor:
    """[n, length] additive mask: query start+i sees cache position j iff 0 <= start+i-j < window."""
    query_pos = torch.arange(n).unsqueeze(1) + start
    distance = query_pos - torch.arange(length).unsqueeze(0)
    visible = (distance >= 0) & (distance < window)
    return torch.where(visible, 0.0, float("-inf"))


class _InPlaceLayer(StaticLayer):
    """One layer's [1, length, kv_heads, dim] cache, written in place at `start` by llama::update_cache."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, start):
        super().__init__(max_cache_len=keys.shape[1])
        self.keys, self.values, self.start = keys, values, start
        self.device = keys.device
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        torch.ops.llama.update_cache(key_states.transpose(1, 2), self.keys, self.start)
        torch.ops.llama.update_cache(value_states.transpose(1, 2), self.values, self.start)
        return self.keys, self.values


def in_place_cache(keys: list, values: list, start) -> Cache:
    return Cache(layers=[_InPlaceLayer(k, v, start) for k, v in zip(keys, values)])
