"""The lean ExecuTorch decoding graph: an in-place KV cache behind transformers' attention.

Lowered as written, a transformers model with a static cache leaves portable work
between its XNNPACK partitions at every step: the cache write (`index_put` and a
`copy_` of the whole buffer), the causal mask and, with grouped KV heads, `expand_copy`
repeating the KV heads over the whole cache. The executorch wheel ships the operators
that remove it (`executorch.extension.llm.custom_ops`, as ExecuTorch's llama example and
optimum-executorch use them):

  - `llama::update_cache(new, cache, start)` writes the new positions in place;
  - `llama::custom_sdpa(q, k_cache, v_cache, start, mask, 0, causal, scale)` maps each
    query head to its KV head by index and, when causal, reads only the first
    `start + n` cache positions.

Two attentions, both on a cache that update_cache writes in place:

  - `EXACT_ROWS` (targets): matmuls over the whole cache with a causal (or windowed) mask,
    grouped query heads folded into rows (no KV head is repeated). Every row's arithmetic
    is the same however many rows a call has, so verifying k tokens in one call gives
    bit for bit the logits of k one-token calls, quantized or not. custom_sdpa's
    multi-token path does not (its rows differ from one-token calls in the last float
    bits, which dynamic int8 activations amplify into different greedy tokens).
    Cache buffers [kv_heads, length, 1, dim]: update_cache's [batch, seq, heads, dim]
    with the KV heads as batch, the same memory as [1, kv_heads, length, dim].
  - `SDPA` (drafters, whose rounding never changes the output): custom_sdpa, reading
    only the positions written so far. Cache buffers [1, length, kv_heads, dim].

The graph contract is the plain graph's: tokens and their positions in, the cache
written at those positions, later positions never read, so a rollback is an overwrite.

Sliding-window layers (Gemma-3: 15 of 18 layers look back 512 tokens) of an exact-rows
graph keep a ring of `window + max_tokens` slots instead of the whole context: position
p lives in slot p mod R, written by llama::update_cache_with_indices. A call of n tokens
overwrites slots that held positions at least R back, which no query of the call (nor, after
a rollback of up to max_tokens rejected tokens, of the next call) can see: R >= window + n
keeps every position a query needs. Each slot's position is known from the call's last
position alone, so the mask (visible: written, not in the future, within the window) is
exact, and a step reads R slots however long the context: the cost of these layers
follows the window, not the capacity. Global layers keep the whole context and read it
all, masked past the fill (exact rows rule out custom_sdpa's reads up to the fill, whose
rows differ from one-token calls: docs/exactness.md).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, StaticLayer

EXACT_ROWS = "omnidraft_exact_rows"
SDPA = "omnidraft_custom_sdpa"


def register(exact_rows: bool) -> str:
    """Load the custom ops, register both attentions with transformers; the name of the one asked for."""
    from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401 - registers torch.ops.llama
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(EXACT_ROWS, _exact_rows_attention)
    AttentionInterface.register(SDPA, _sdpa_attention)
    for name in (EXACT_ROWS, SDPA):
        AttentionMaskInterface.register(name, _no_mask)  # both mask by position themselves
    return EXACT_ROWS if exact_rows else SDPA


def cache_shape(exact_rows: bool, kv_heads: int, length: int, dim: int) -> tuple[int, int, int, int]:
    return (kv_heads, length, 1, dim) if exact_rows else (1, length, kv_heads, dim)


def _no_mask(*args, **kwargs):
    return None


def _exact_rows_attention(module, query, key, value, attention_mask, scaling=None, sliding_window=None,
                          dropout=0.0, row_masks=None, **kwargs):
    """`query` [1, heads, n, dim] over a layer's whole cache `key`/`value` [1, kv_heads, length, dim]."""
    _, heads, n, dim = query.shape
    kv_heads, length = key.shape[1], key.shape[2]
    group = heads // kv_heads  # query head h reads KV head h // group, as transformers' repeat_kv
    mask = row_masks["window"] if sliding_window and "window" in row_masks else row_masks["causal"]
    q = query.reshape(kv_heads, group * n, dim)
    # bmm, not matmul: exported, matmul becomes expand_copy + bmm, a portable copy of the whole cache.
    scores = torch.bmm(q, key.reshape(kv_heads, length, dim).transpose(1, 2)) * scaling
    probs = torch.softmax(scores.reshape(kv_heads, group, n, length) + mask, dim=-1)
    out = torch.bmm(probs.reshape(kv_heads, group * n, length), value.reshape(kv_heads, length, dim))
    return out.view(1, heads, n, dim).transpose(1, 2), None


def _sdpa_attention(module, query, key, value, attention_mask, scaling=None, sliding_window=None, dropout=0.0,
                    cache_start=None, **kwargs):
    """`query` [1, heads, n, dim] over a layer's whole cache `key`/`value` [1, length, kv_heads, dim]."""
    q = query.transpose(1, 2)
    n, length = q.shape[1], key.shape[1]
    if sliding_window and sliding_window < length:
        mask = additive_mask(cache_start, n, length, sliding_window)
        out = torch.ops.llama.custom_sdpa(q, key, value, cache_start, mask, 0.0, False, scaling)
    else:
        out = torch.ops.llama.custom_sdpa(q, key, value, cache_start, None, 0.0, True, scaling)
    return out, None


def additive_mask(start, n: int, length: int, window: int | None = None) -> torch.Tensor:
    """[n, length]: 0 where query start+i sees cache position j (0 <= start+i-j, and < window), else -inf."""
    query_pos = torch.arange(n).unsqueeze(1) + start
    distance = query_pos - torch.arange(length).unsqueeze(0)
    visible = distance >= 0
    if window is not None:
        visible = visible & (distance < window)
    return torch.where(visible, 0.0, float("-inf"))


def ring_mask(start, n: int, slots: int, window: int) -> torch.Tensor:
    """[n, slots]: 0 where query start+i sees the position ring slot s holds after this call, else -inf.

    Slot s holds the latest position p <= start+n-1 with p = s (mod slots) (p < 0: never written); query q
    sees it when p <= q and q - p < window. A slot overwritten by a later token of the call, or by a rejected
    token before a rollback, holds a position that is either in the future or out of every query's window
    (slots >= window + tokens per call), so the mask hides exactly what must not be seen."""
    last = start + n - 1
    slot = torch.arange(slots).unsqueeze(0)
    held = last - torch.remainder(last - slot, slots)
    query = torch.arange(n).unsqueeze(1) + start
    distance = query - held
    visible = (held >= 0) & (distance >= 0) & (distance < window)
    return torch.where(visible, 0.0, float("-inf"))


def ring_slots(config, max_context: int, max_tokens: int) -> int | None:
    """The ring length of an exact-rows graph's sliding-window layers (None: the model has none)."""
    text = config.get_text_config()
    window = getattr(text, "sliding_window", None)
    types = getattr(text, "layer_types", None) or []
    if not window or "sliding_attention" not in types:
        return None
    return min(max_context, window + max_tokens)


def cache_lengths(config, max_context: int, max_tokens: int, exact_rows: bool) -> list[int]:
    """Each layer's cache length: a ring for the sliding-window layers of an exact-rows graph, else the context."""
    text = config.get_text_config()
    ring = ring_slots(config, max_context, max_tokens) if exact_rows else None
    types = getattr(text, "layer_types", None) or ["full_attention"] * text.num_hidden_layers
    return [ring if ring and kind == "sliding_attention" else max_context for kind in types]


def row_masks(start, n: int, length: int, window: int | None, ring: int | None = None) -> dict:
    """The masks of an exact-rows call, built once and shared by all layers: "causal" [n, length] for the
    global layers, "window" [n, ring] (or [n, length] without a ring) for the sliding-window ones."""
    masks = {"causal": additive_mask(start, n, length)}
    if ring:
        masks["window"] = ring_mask(start, n, ring, window)
    elif window and window < length:
        masks["window"] = additive_mask(start, n, length, window)
    return masks


class _InPlaceLayer(StaticLayer):
    """One layer's cache, written in place at `start` by llama::update_cache, or into ring slots
    (`slots`: [kv_heads, n] indices) by llama::update_cache_with_indices."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, start, exact_rows: bool, slots=None):
        super().__init__(max_cache_len=keys.shape[1])
        self.keys, self.values, self.start, self.exact_rows, self.slots = keys, values, start, exact_rows, slots
        self.device = keys.device
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.exact_rows:
            torch.ops.llama.update_cache(key_states.transpose(1, 2), self.keys, self.start)
            torch.ops.llama.update_cache(value_states.transpose(1, 2), self.values, self.start)
            return self.keys, self.values
        kv_heads, length, _, dim = self.keys.shape
        n = key_states.shape[2]
        for new, cache in ((key_states, self.keys), (value_states, self.values)):
            new = new.reshape(kv_heads, n, 1, dim)
            if self.slots is None:
                torch.ops.llama.update_cache(new, cache, self.start)
            else:
                torch.ops.llama.update_cache_with_indices(new, cache, 0, self.slots)
        return self.keys.view(1, kv_heads, length, dim), self.values.view(1, kv_heads, length, dim)


def in_place_cache(keys: list, values: list, start, exact_rows: bool, n: int | None = None) -> Cache:
    """The layers' caches for a call of n tokens at `start`; a layer whose cache is shorter than the longest is
    a ring (exact rows), written at slots (start + i) mod its length."""
    longest = max(k.shape[1] for k in keys)
    layers = []
    for k, v in zip(keys, values):
        slots = None
        if exact_rows and k.shape[1] < longest:
            slots = torch.remainder(torch.arange(n) + start, k.shape[1]).unsqueeze(0).expand(k.shape[0], n).contiguous()
        layers.append(_InPlaceLayer(k, v, start, exact_rows, slots))
    return Cache(layers=layers)
