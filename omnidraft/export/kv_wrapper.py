"""A causal LM as a pure function of (tokens, positions, KV cache) -> (logits, KV cache).

Exported graphs cannot hold Python cache objects, so the static KV cache becomes
tensors of shape [layers, 1, kv_heads, max_context, head_dim]:
  - ONNX (`StaticKVModel`): explicit inputs and outputs, owned by the runner;
  - ExecuTorch (`BufferKVModel`): mutable buffers that live inside the program.
The graph writes the new tokens' states at their positions; positions past the
current one are masked, so rolling back a rejected draft costs nothing: the
runner just writes there again. In the ONNX graph every layer, sliding-window ones
included, gets the full length; the ExecuTorch target's sliding-window layers keep a
ring of window + tokens per call (llama_ops.py), whose rollbacks runner.py bounds.

With `head=True` (drafters) the graph also takes the acceptance head's weights
(head_weight [F], head_bias [1]) and returns the last position's head features
[1, F] and P(accept) [1] (runtime/acceptance.py): weights as inputs, so the
head can keep learning on the phone without a new export.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, StaticLayer

from ..runtime.acceptance import head_outputs, n_features
from . import llama_ops

HEAD_INPUTS = ["head_weight", "head_bias"]
HEAD_OUTPUTS = ["head_features", "accept_prob"]


def kv_shape(config, max_context: int) -> tuple[int, int, int, int, int]:
    text = config.get_text_config()
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    return (text.num_hidden_layers, 1, text.num_key_value_heads, max_context, head_dim)


def _static_cache(keys: list[torch.Tensor], values: list[torch.Tensor], start: torch.Tensor, max_context: int) -> Cache:
    """A transformers Cache whose layers write into the given tensors from `start` on."""
    layers = []
    for k, v in zip(keys, values):
        layer = StaticLayer(max_cache_len=max_context)
        layer.keys, layer.values = k, v
        layer.device = k.device
        layer.batch_size, layer.num_heads = k.shape[:2]
        layer.k_head_dim = layer.v_head_dim = k.shape[-1]
        layer.cumulative_length = start.clone()
        layer.is_initialized = True
        layers.append(layer)
    return Cache(layers=layers)


def _decode(model, input_ids, position_ids, cache, head_weight, head_bias, **attention) -> tuple:
    """(logits,) or, with head weights, (logits, head features, P(accept))."""
    head = head_weight is not None
    out = model(input_ids=input_ids, position_ids=position_ids, cache=cache, use_cache=True,
                output_hidden_states=head, **attention)
    if not head:
        return (out.logits,)
    return (out.logits, *head_outputs(out.hidden_states[-1], out.logits, head_weight, head_bias))


def head_example(model) -> tuple[torch.Tensor, torch.Tensor]:
    """Example head weights for tracing (any values: they are graph inputs).

    Also installs transformers' hidden-state capturing hooks now, in eager mode:
    installed lazily inside a strict torch.export, their lock breaks tracing.
    """
    with torch.no_grad():
        model(input_ids=torch.ones((1, 1), dtype=torch.long), output_hidden_states=True)
    return torch.zeros(n_features(model.config)), torch.zeros(1)


class StaticKVModel(torch.nn.Module):
    """KV cache in, KV cache out (ONNX)."""

    def __init__(self, model, max_context: int):
        super().__init__()
        self.model = model
        self.max_context = max_context

    def forward(self, input_ids, position_ids, past_keys, past_values, head_weight=None, head_bias=None,
                logit_rows=None):
        n = past_keys.shape[0]
        keys = [past_keys[i].clone() for i in range(n)]
        values = [past_values[i].clone() for i in range(n)]
        cache = _static_cache(keys, values, position_ids[0, 0], self.max_context)
        rows = {} if logit_rows is None else {"logits_to_keep": logit_rows}
        logits, *head = _decode(self.model, input_ids, position_ids, cache, head_weight, head_bias, **rows)
        return (logits, torch.stack(keys), torch.stack(values), *head)


class StaticKVRowsModel(StaticKVModel):
    """StaticKVModel taking, after the cache, the rows whose logits it returns (ONNX targets)."""

    def forward(self, input_ids, position_ids, past_keys, past_values, logit_rows):
        return super().forward(input_ids, position_ids, past_keys, past_values, logit_rows=logit_rows)


class BufferKVModel(torch.nn.Module):
    """KV cache as mutable buffers inside the program (ExecuTorch), written in place (llama_ops.py).

    `exact_rows` (targets): attention whose rows do not depend on how many tokens a call
    carries, so a verification equals one-token calls bit for bit, with a ring of
    window + max_tokens slots for sliding-window layers; otherwise (drafters) ExecuTorch's
    custom SDPA, which reads only the positions written so far. With `logit_rows` (targets)
    the graph takes a third input, the rows of the call whose logits it returns
    ([k] int64, 1 <= k <= its maximum): a long prefill chunk computes one row of the
    262k-wide output layer, not all of them.
    """

    def __init__(self, model, max_context: int, exact_rows: bool, max_tokens: int = 16, logit_rows: bool = False):
        super().__init__()
        self.model = model
        self.max_context = max_context
        layers, _, heads, _, dim = kv_shape(model.config, max_context)
        self.lengths = llama_ops.cache_lengths(model.config, max_context, max_tokens, exact_rows)
        for i, length in enumerate(self.lengths):
            shape = llama_ops.cache_shape(exact_rows, heads, length, dim)
            self.register_buffer(f"k_cache_{i}", torch.zeros(shape), persistent=False)
            self.register_buffer(f"v_cache_{i}", torch.zeros(shape), persistent=False)
        self.n_layers = layers
        self.exact_rows = exact_rows
        self.logit_rows = logit_rows
        self.window = getattr(model.config.get_text_config(), "sliding_window", None)
        self.ring = llama_ops.ring_slots(model.config, max_context, max_tokens) if exact_rows else None
        if self.ring == max_context:
            self.ring = None  # the context fits the ring: every layer keeps it whole
        model.config._attn_implementation = llama_ops.register(exact_rows)

    def forward(self, input_ids, position_ids, *extra):
        logit_rows = extra[0] if self.logit_rows else None
        rest = extra[1:] if self.logit_rows else extra
        head_weight, head_bias = rest if rest else (None, None)
        keys = [getattr(self, f"k_cache_{i}") for i in range(self.n_layers)]
        values = [getattr(self, f"v_cache_{i}") for i in range(self.n_layers)]
        n = input_ids.shape[1]
        start = position_ids[0, 0].item()
        torch._check_is_size(start)
        torch._check(start + n <= self.max_context)
        cache = llama_ops.in_place_cache(keys, values, start, self.exact_rows, n)
        if self.exact_rows:
            attention = {"row_masks": llama_ops.row_masks(start, n, self.max_context, self.window, self.ring)}
        else:
            attention = {"cache_start": start}
        if logit_rows is not None:
            attention["logits_to_keep"] = logit_rows
        out = _decode(self.model, input_ids, position_ids, cache, head_weight, head_bias, **attention)
        return out if head_weight is not None else out[0]


def runner_meta(model, max_context: int, max_tokens: int, head: bool = False, max_logit_rows: int | None = None,
                cache_lengths: list[int] | None = None) -> dict:
    """What a runner needs to know about a decoding graph (bundle.json, per model)."""
    meta = {
        "kv_shape": list(kv_shape(model.config, max_context)),
        "vocab_size": int(model.config.get_text_config().vocab_size),
        "max_context": max_context,
        "max_tokens_per_call": max_tokens,
    }
    if max_logit_rows is not None:
        meta["max_logit_rows"] = max_logit_rows
    if cache_lengths is not None and min(cache_lengths) < max_context:
        meta["cache_lengths"] = list(cache_lengths)
        meta["sliding_window"] = int(model.config.get_text_config().sliding_window)
    if head:
        meta["acceptance_head"] = {"features": n_features(model.config), "inputs": HEAD_INPUTS,
                                   "outputs": HEAD_OUTPUTS}
    return meta
