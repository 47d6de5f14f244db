"""Who takes the gradient steps: eager torch, or ExecuTorch's training runtime.

The online adapter (buffer, guard, persistence) does not care; a learner
trains on examples, measures greedy acceptance, and can snapshot and restore
its trainable tensors.
  - EagerLearner: LoRA (or every weight) on the torch drafter the eager runner
    decodes with; torch's clip_grad_norm_ and AdamW.
  - ExecuTorchLearner: LoRA steps through the bundle's drafter_train.pte (the
    whole step, clipping and Adam included, is one program call); the drafter
    runner (drafter_lora.pte) is fed the live LoRA tensors at every call, so an
    update is used by the next draft.
Both follow one update rule (update_rule.py), so one set of defaults serves both.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import torch

from ..draft_head import refresh_draft_head
from ..errors import OmniDraftError
from ..runtime.choices import Backend
from .examples import Example, Mapping, padded_batch, unit_hits
from .lora import LoRALinear, add_lora, check_fits, copy_into, forget_merged, lora_parameters
from .loss import Batch, batch_loss, greedy_acceptance
from .update_rule import RULE


class EagerLearner:
    """`init`: the LoRA tensors to start from, by name (say an ExecuTorch program's lora_init, so that
    both learners start alike); None draws fresh adapters."""

    def __init__(self, model, config, mapping: Mapping, init: dict[str, torch.Tensor] | None = None):
        self.model = model
        self.config = config
        self.mapped = torch.from_numpy(mapping.draft_ids)
        if config.lora is not None:
            add_lora(model, config.lora)
            self.trainable = lora_parameters(model)
            if init is not None:
                copy_into(self.trainable, init)
        else:
            if init is not None:
                raise ValueError("starting LoRA tensors given for full fine-tuning")
            model.requires_grad_(True)
            self.trainable = dict(model.named_parameters())
        self.params = list(self.trainable.values())
        self.optimizer = RULE.eager_optimizer(self.params, config.lr)

    def identity(self) -> dict:
        return {"learner": "eager", "mode": "lora" if self.config.lora else "full",
                "lora": self.config.lora.to_dict() if self.config.lora else None}

    def step(self, examples: list[Example]) -> tuple[float, float, float]:
        done = self.optimizer.state[self.params[0]].get("step", 0) if self.params[0] in self.optimizer.state else 0
        for group in self.optimizer.param_groups:
            group["lr"] = RULE.lr_at(self.config.lr, int(done), self.config.warmup)
        self.optimizer.zero_grad(set_to_none=True)
        loss, l_dm, l_ngram = batch_loss(self.model, Batch.of(examples), self.mapped, self.config.lam,
                                         self.config.use_kl)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, RULE.clip)
        self.optimizer.step()
        self._sync_draft_head()
        return loss.item(), l_dm.item(), l_ngram.item()

    def _sync_draft_head(self) -> None:
        """Full fine-tuning moves the tied head: the draft head's copy of its rows must follow."""
        if self.config.lora is None:
            refresh_draft_head(self.model)

    def acceptance(self, examples: list[Example], base: bool = False) -> float:
        """Teacher-forced greedy acceptance on the examples; base=True: of the drafter without its adapter."""
        if not base or self.config.lora is None:
            return greedy_acceptance(self.model, Batch.of(examples))
        layers = [m for m in self.model.modules() if isinstance(m, LoRALinear)]
        scales = [m.scale for m in layers]
        try:
            for m in layers:
                m.scale = 0.0
            forget_merged(self.model)
            return greedy_acceptance(self.model, Batch.of(examples))
        finally:
            for m, scale in zip(layers, scales):
                m.scale = scale
            forget_merged(self.model)

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
    """LoRA training through the bundle's exported update step (drafter_train.pte, a fixed batch and window).

    One program call per step: the LoRA tensors, their Adam moments and the step number go in,
    the updated ones come out (the same rule as the eager learner, update_rule.py). The LoRA
    tensors start from the program's lora_init, or from `init` (by name) when given.
    """

    def __init__(self, train_pte: Path, lora_names: list[str], window: int, batch: int, n_mapped: int, lr: float,
                 drafter_runner=None, init: dict[str, torch.Tensor] | None = None, warmup: int = 1):
        from executorch.runtime import Runtime

        self.window, self.batch, self.n_mapped, self.lr, self.warmup = window, batch, n_mapped, lr, warmup
        program = Runtime.get().load_program(str(train_pte))
        self.update = program.load_method("forward")
        self.params = program_lora_init(program, lora_names)  # updated in place by every step
        if init is not None:
            copy_into(self.params, init)
        self.exp_avg = {n: torch.zeros_like(t) for n, t in self.params.items()}
        self.exp_avg_sq = {n: torch.zeros_like(t) for n, t in self.params.items()}
        self.steps = 0
        self.drafter = drafter_runner
        self._publish()

    def _publish(self) -> None:
        """Write the current LoRA weights into the drafter runner's own input tensors (used by its next call)."""
        if self.drafter is not None:
            for mine, theirs in zip(self.params.values(), self.drafter.extra_inputs):
                theirs.copy_(mine)

    def identity(self) -> dict:
        return {"learner": "executorch", "mode": "lora", "window": self.window, "batch": self.batch,
                "lora": {n: list(t.shape) for n, t in self.params.items()}}

    def step(self, examples: list[Example]) -> tuple[float, float, float]:
        """One clipped Adam step on the pooled loss of the examples (one program call)."""
        state = [*self.params.values(), *self.exp_avg.values(), *self.exp_avg_sq.values()]
        batch = [torch.from_numpy(a) for a in padded_batch(examples, self.batch, self.window, self.n_mapped)]
        lr = RULE.lr_at(self.lr, self.steps, self.warmup)
        out = self.update.execute([*state, torch.tensor(float(self.steps + 1)), torch.tensor(float(lr)), *batch])
        for mine, new in zip(state, out[3:]):
            mine.copy_(new)  # before the next call: the program may reuse its output memory
        self.steps += 1
        self._publish()
        return tuple(float(o) for o in out[:3])

    def acceptance(self, examples: list[Example], base: bool = False) -> float:
        """Teacher-forced greedy acceptance through the drafter's own program (its cache is reset after);
        base=True: of the drafter without its adapter (zero LoRA tensors for these calls)."""
        hits = total = 0
        runner = self.drafter
        saved = [t.clone() for t in runner.extra_inputs] if base else []
        try:
            for t in runner.extra_inputs if base else []:
                t.zero_()
            for e in examples:
                runner.reset()
                hits += unit_hits(e, runner.forward(e.ids, 0, len(e.ids)).argmax(-1))
                total += len(e.units)
        finally:
            for t, s in zip(runner.extra_inputs, saved):
                t.copy_(s)
            runner.reset()
        return hits / max(total, 1)

    def state(self) -> dict:
        clone = lambda d: {n: t.clone() for n, t in d.items()}  # noqa: E731
        return {"weights": clone(self.params), "optimizer": {"exp_avg": clone(self.exp_avg),
                                                             "exp_avg_sq": clone(self.exp_avg_sq), "step": self.steps}}

    def load_state(self, state: dict) -> None:
        """ValueError (nothing changed) unless every tensor fits; in place: the drafter reads these tensors."""
        opt = state.get("optimizer")
        if not isinstance(opt, dict) or not isinstance(opt.get("step"), int) or opt["step"] < 0:
            raise ValueError("damaged optimizer state")
        for key in ("exp_avg", "exp_avg_sq"):
            if not isinstance(opt.get(key), dict) or not all(
                    torch.is_tensor(t) and torch.isfinite(t).all() for t in opt[key].values()):
                raise ValueError(f"damaged optimizer {key}")
        for mine, saved in ((self.params, state["weights"]), (self.exp_avg, opt["exp_avg"]),
                            (self.exp_avg_sq, opt["exp_avg_sq"])):
            check_fits(mine, saved)
        copy_into(self.params, state["weights"])
        copy_into(self.exp_avg, opt["exp_avg"])
        copy_into(self.exp_avg_sq, opt["exp_avg_sq"])
        self.steps = opt["step"]
        self._publish()

    def extra_bytes(self) -> dict[str, int]:
        size = lambda d: sum(t.numel() * t.element_size() for t in d.values())  # noqa: E731
        return {"trainable": size(self.params), "optimizer": size(self.exp_avg) + size(self.exp_avg_sq)}


def program_lora_init(program, lora_names: list[str]) -> dict[str, torch.Tensor]:
    """The fresh LoRA tensors an update-step program was exported with (its "lora_init" method), by name.

    `program`: a loaded ExecuTorch program, or the path of drafter_train.pte."""
    if isinstance(program, (str, Path)):
        from executorch.runtime import Runtime

        program = Runtime.get().load_program(str(program))
    fresh = program.load_method("lora_init").execute([])
    if len(fresh) != len(lora_names):
        raise ValueError("the training program's tensors do not match the drafter's LoRA inputs")
    return {n: t.clone() for n, t in zip(lora_names, fresh)}


# -- which learner: the eager drafter, or the bundle's training program -------------------------------
def learner_for(bundle, drafting, config, init=None):
    """What an OnlineAdapter trains: the eager drafter model, or the bundle's ExecuTorch training program.

    `init`: LoRA tensors by name for the ExecuTorch learner to start from (default: the program's own)."""
    drafter = drafting.drafter if drafting is not None else None
    if drafter is None:
        raise OmniDraftError("adaptation needs a drafter (drop --no-speculation)")
    if bundle is not None:
        return _executorch_learner(bundle, drafting, config, init)
    if drafter.backend == Backend.EAGER:
        return drafter.model
    raise OmniDraftError(f"adaptation runs on the eager or executorch backend, not {drafter.backend}")


def lora_input_names(bundle, backend: Backend = Backend.EXECUTORCH) -> list[str]:
    """The drafter's LoRA tensors in the order the bundle's programs take them."""
    return [name for name, _shape in training_section(bundle, backend)["lora_inputs"]]


def _executorch_learner(bundle, drafting, config, init=None):
    drafter = drafting.drafter
    training = training_section(bundle, drafter.backend)
    graphs = bundle.model("drafter").graphs
    names = lora_input_names(bundle, drafter.backend)
    n_mapped = len(Mapping.from_bridge(drafting.bridge))
    if n_mapped != training["mapped"]:
        raise OmniDraftError("the bundle's training graph was exported for another vocabulary mapping")
    if config.batch > training["batch"]:
        raise OmniDraftError(f"the bundle's training program takes at most {training['batch']} examples per step, "
                             f"not {config.batch}: re-export with --train-batch {config.batch}")
    try:
        return ExecuTorchLearner(bundle.root / graphs["executorch_train"], names, int(training["window"]),
                                 int(training["batch"]), n_mapped, config.lr, drafter, init, config.warmup)
    except Exception as e:  # noqa: BLE001 - a damaged or foreign program is a user problem
        raise OmniDraftError(f"cannot load the bundle's training program: {str(e).splitlines()[0][:200]}") from e


def training_section(bundle, backend: str) -> dict:
    """The bundle's training programs' description; on-device adaptation needs it, on ExecuTorch."""
    training = bundle.manifest.training
    if not training:
        raise OmniDraftError("--adapt needs a bundle exported --with-training (its LoRA training program)")
    if backend != Backend.EXECUTORCH:
        raise OmniDraftError("on-device adaptation runs on --backend executorch (its training program)")
    if "update" not in training:
        raise OmniDraftError("the bundle's training program is of an older format (version 3, SGD through ExecuTorch's "
                             "training API): re-export it with --with-training")
    return training
