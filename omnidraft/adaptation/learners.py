"""Who takes the gradient steps: eager torch, or ExecuTorch's training runtime.

The online adapter (buffer, guard, persistence) does not care; a learner
trains on examples, measures greedy acceptance, and can snapshot and restore
its trainable tensors.
  - EagerLearner: LoRA (or every weight) on the torch drafter the eager runner
    decodes with; AdamW.
  - ExecuTorchLearner: LoRA steps through the bundle's drafter_train.pte with
    ExecuTorch's SGD; the drafter runner (drafter_lora.pte) is fed the live
    LoRA tensors at every call, so an update is used by the next draft.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import torch

from ..draft_head import refresh_draft_head
from .examples import Example, Mapping
from .lora import LoRALinear, add_lora, copy_into, forget_merged, lora_parameters
from .loss import Batch, batch_loss, greedy_acceptance


class EagerLearner:
    def __init__(self, model, config, mapping: Mapping):
        self.model = model
        self.config = config
        self.mapped = torch.from_numpy(mapping.draft_ids)
        if config.lora is not None:
            add_lora(model, config.lora)
            self.trainable = lora_parameters(model)
        else:
            model.requires_grad_(True)
            self.trainable = dict(model.named_parameters())
        self.params = list(self.trainable.values())
        self.optimizer = torch.optim.AdamW(self.params, lr=config.lr, weight_decay=0.0)

    def identity(self) -> dict:
        return {"learner": "eager", "mode": "lora" if self.config.lora else "full",
                "lora": self.config.lora.to_dict() if self.config.lora else None}

    def step(self, examples: list[Example]) -> tuple[float, float, float]:
        self.optimizer.zero_grad(set_to_none=True)
        loss, l_dm, l_ngram = batch_loss(self.model, Batch.of(examples), self.mapped, self.config.lam,
                                         self.config.use_kl)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.optimizer.step()
        self._sync_draft_head()
        return loss.item(), l_dm.item(), l_ngram.item()

    def _sync_draft_head(self) -> None:
        """Full fine-tuning moves the tied head: the draft head's copy of its rows must follow."""
        if self.config.lora is None:
            refresh_draft_head(self.model)

    def acceptance(self, examples: list[Example]) -> float:
        return greedy_acceptance(self.model, Batch.of(examples))

    def state(self) -> dict:
        """A copy of everything an update changes (to roll back, or to save)."""
        return {"weights": {n: p.detach().clone() for n, p in self.trainable.items()},
                "optimizer": copy.deepcopy(self.optimizer.state_dict())}

    def load_state(self, state: dict) -> None:
        """ValueError (nothing changed) unless the weights and the optimizer state fit this drafter."""
        self._check_optimizer(state["optimizer"])
        copy_into(self.trainable, state["weights"])
        forget_merged(self.model)
        self._sync_draft_head()
        self.optimizer.load_state_dict(state["optimizer"])

    def _check_optimizer(self, saved: dict) -> None:
        groups = saved.get("param_groups") if isinstance(saved, dict) else None
        if not isinstance(groups, list) or len(groups) != 1 or groups[0].get("params") != list(range(len(self.params))):
            raise ValueError("the saved optimizer state does not match the drafter's trainable tensors")
        for i, moments in saved.get("state", {}).items():
            if not isinstance(i, int) or not 0 <= i < len(self.params) or not isinstance(moments, dict):
                raise ValueError("damaged optimizer state")
            for key in ("exp_avg", "exp_avg_sq"):
                t = moments.get(key)
                if not torch.is_tensor(t) or t.shape != self.params[i].shape or not torch.isfinite(t).all():
                    raise ValueError(f"saved optimizer {key} {i} does not fit its tensor")

    def extra_bytes(self) -> dict[str, int]:
        opt = sum(t.numel() * t.element_size() for s in self.optimizer.state.values() for t in s.values()
                  if torch.is_tensor(t))
        merged = sum(m.base.weight.numel() * m.base.weight.element_size()
                     for m in self.model.modules() if isinstance(m, LoRALinear))
        return {"trainable": sum(p.numel() * p.element_size() for p in self.params), "optimizer": opt,
                "merged_weights": merged}


class ExecuTorchLearner:
    """LoRA training through an exported forward+backward program (batch 1, fixed window)."""

    def __init__(self, train_pte: Path, lora_names: list[str], window: int, n_mapped: int, lr: float,
                 drafter_runner=None):
        from executorch.extension.training import _load_for_executorch_for_training_from_buffer, get_sgd_optimizer

        self.window, self.n_mapped, self.lr = window, n_mapped, lr
        # The module reads the program from this buffer without owning it: keep it alive.
        self._program = Path(train_pte).read_bytes()
        self.module = _load_for_executorch_for_training_from_buffer(self._program)
        # The parameters appear after the first call: run one with every loss row weighted 0.
        empty = Example(np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros((0, n_mapped), np.float16),
                        np.zeros(0, np.int64))
        self.module.forward_backward("forward", self._inputs(empty))
        self.params = self.module.named_parameters()  # live tensors: the optimizer updates them in place
        missing = [n for n in lora_names if f"model.{n}" not in self.params]
        if missing or len(lora_names) != len(self.params):
            raise ValueError("the training program's parameters do not match the drafter's LoRA inputs")
        self.optimizer = get_sgd_optimizer(self.params, lr, 0, 0, 0, False)
        self.lora_inputs = [self.params[f"model.{n}"] for n in lora_names]
        self.drafter = drafter_runner
        self._publish()

    def _inputs(self, example: Example) -> list:
        return [torch.from_numpy(a) for a in example.padded(self.window, self.n_mapped)]

    def _publish(self) -> None:
        """Write the current LoRA weights into the drafter runner's own input tensors (used by its next call)."""
        if self.drafter is not None:
            for mine, theirs in zip(self.lora_inputs, self.drafter.extra_inputs):
                theirs.copy_(mine)

    def identity(self) -> dict:
        return {"learner": "executorch", "mode": "lora", "window": self.window,
                "lora": {n: list(t.shape) for n, t in self.params.items()}}

    def step(self, examples: list[Example]) -> tuple[float, float, float]:
        """One SGD step on the mean gradient of the examples (one program call each)."""
        totals, grads = np.zeros(3), None
        for e in examples:
            out = self.module.forward_backward("forward", self._inputs(e))
            totals += [float(o) for o in out[:3]]
            g = self.module.named_gradients()
            grads = {n: t.clone() for n, t in g.items()} if grads is None else {n: grads[n] + g[n] for n in g}
        self.optimizer.step({n: t / len(examples) for n, t in grads.items()})
        self._publish()
        return tuple(totals / len(examples))

    def acceptance(self, examples: list[Example]) -> float:
        """Teacher-forced greedy acceptance through the drafter's own program (its cache is reset after)."""
        hits = total = 0
        runner = self.drafter
        for e in examples:
            runner.reset()
            choice = runner.forward(e.ids, 0, len(e.ids)).argmax(-1)
            for a, z in e.units:
                hits += bool(np.array_equal(choice[a : z + 1], e.ids[a + 1 : z + 2]))
                total += 1
        runner.reset()
        return hits / max(total, 1)

    def state(self) -> dict:
        return {"weights": {n: t.clone() for n, t in self.params.items()}}  # plain SGD keeps no state

    def load_state(self, state: dict) -> None:
        copy_into(self.params, state["weights"])  # in place: the program reads these tensors
        self._publish()

    def extra_bytes(self) -> dict[str, int]:
        return {"trainable": sum(t.numel() * t.element_size() for t in self.params.values()), "optimizer": 0}
