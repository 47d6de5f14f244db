"""The hybrid policy: each round, the proposal with the most expected tokens per second.

Options each round (tokens committed = accepted + 1 in every case):
  - nothing: a plain target step, 1 token for T(1);
  - a lookup prefix of m tokens: 1 + E_m tokens for T(m + 1), E_m from the lookup
    scorer; lookup itself costs an index query (measured, reported) and no model call;
  - the drafter: its recent mean tokens per round for its recent mean cost (its calls,
    including catching up on text committed while it was idle, plus T(m + 1)).
T(n), the target's call time for n tokens, and the drafter's call time are measured
on the machine at hand from the loop's own calls (CallCosts). The drafter is tried
first (its worth is unknown until measured) and then again after `explore_every`
rounds in which it was not chosen, so that its estimate follows the text; each
drafter round that does not pay doubles that wait (up to MAX_WAIT rounds), one that
pays resets it. The wait is kept with the measured costs between runs.
A drafter whose measured step is so slow that even perfect acceptance could not
beat target-only decoding ((K + 1) tokens for K steps and a (K + 1)-token verification)
is not re-checked at all: on such a machine the hybrid is lookup alone.
When lookup is chosen the drafter is not called; it catches up in one call the next
time it drafts. Lookup followed by drafting in the same round is not tried.
"""

from __future__ import annotations

import time

import numpy as np

from .bridge import Proposal
from .drafting import DRAFTER, DraftModel
from .lookup_proposer import LOOKUP, LookupProposer, expected_accepted
from .proposers import Round


class CallCosts:
    """Seconds per target call of n tokens (T(n) = a + b (n - 1), least squares with decay) and per drafter call.

    fixed=(a, b, drafter_call) pins the costs (reproducible tests and what-if runs).
    """

    def __init__(self, decay: float = 0.97, fixed: tuple[float, float, float] | None = None):
        self.decay = decay
        self.fixed = fixed
        self._sums = np.zeros(5)  # weights, n, s, n*n, n*s
        self._drafter = None  # EMA of seconds per drafter call (catching up included)
        self._step = None  # EMA of seconds per one-token drafter step

    def observe_target(self, n: int, seconds: float) -> None:
        self._sums = self.decay * self._sums + np.array([1.0, n, seconds, n * n, n * seconds])

    def observe_drafter(self, calls: int, seconds: float) -> None:
        if calls:
            per_call = seconds / calls
            self._drafter = per_call if self._drafter is None else 0.8 * self._drafter + 0.2 * per_call

    def observe_drafter_step(self, seconds: float) -> None:
        self._step = seconds if self._step is None else 0.8 * self._step + 0.2 * seconds

    def drafter_step(self) -> float | None:
        return self.fixed[2] if self.fixed else self._step

    def target(self, n: int) -> float:
        if self.fixed:
            a, b, _ = self.fixed
            return a + b * (n - 1)
        w, sn, ss, snn, sns = self._sums
        if w <= 0:
            return 1.0 + 0.1 * (n - 1)  # nothing measured yet: only ratios matter
        mean_n, mean_s = sn / w, ss / w
        var = snn / w - mean_n**2
        slope = max((sns / w - mean_n * mean_s) / var, 0.0) if var > 0.1 else 0.1 * mean_s / max(mean_n, 1.0)
        return max(mean_s + slope * (n - mean_n), 1e-6)

    def drafter_call(self) -> float | None:
        if self.fixed:
            return self.fixed[2]
        return self._drafter

    def state(self) -> dict:
        return {"sums": self._sums.tolist(), "drafter_call": self._drafter, "drafter_step": self._step}

    def load_state(self, state: dict) -> None:
        """ValueError (nothing changed) unless every field is a finite, non-negative measurement."""
        sums, call, step = state["sums"], state["drafter_call"], state["drafter_step"]
        sums = np.asarray(sums, dtype=np.float64)
        ok = sums.shape == (5,) and np.isfinite(sums).all() and (sums[[0, 1, 2, 3]] >= 0).all()
        ok = ok and all(v is None or (isinstance(v, (int, float)) and np.isfinite(v) and v >= 0) for v in (call, step))
        if not ok:
            raise ValueError("damaged (costs)")
        self._sums, self._drafter, self._step = sums, call, step

    def summary(self) -> dict:
        return {"target_step_ms": 1000 * self.target(1), "target_verify_ms_per_extra_token":
                1000 * (self.target(2) - self.target(1)),
                "drafter_call_ms": None if self.drafter_call() is None else 1000 * self.drafter_call()}


def best_prefix(probs: np.ndarray, target_cost) -> tuple[float, int]:
    """The lookup prefix with the most expected tokens per second: (tokens per second, its length m).

    m tokens verified in one call of m + 1 tokens give 1 + E_m tokens, E_m = sum_i prod_{j<=i} P_j.
    """
    gains = 1.0 + expected_accepted(np.asarray(probs, dtype=np.float64))
    values = gains / np.array([target_cost(m + 1) for m in range(1, len(gains) + 1)])
    i = int(np.argmax(values))
    return float(values[i]), i + 1


MAX_WAIT = 1024
COSTS_FORMAT = "omnidraft-hybrid-costs-1"


class Hybrid:
    def __init__(self, lookup: LookupProposer | None, drafting: DraftModel | None, costs: CallCosts | None = None,
                 explore_every: int = 32):
        if lookup is None and drafting is None:
            raise ValueError("the hybrid needs lookup, a drafter or both")
        self.lookup = lookup
        self.drafting = drafting
        self.costs = costs or CallCosts()
        self.explore_every = explore_every
        self._drafter_rounds = None  # EMA of (tokens per round, drafter calls, proposed per round)
        self._idle = 0
        self._wait = explore_every  # rounds without the drafter before it is re-checked
        self._draft_calls = 0
        self.choices = {}

    def begin(self, seq, config, rng) -> None:
        if self.lookup is not None:
            self.lookup.begin(seq, config, rng)
        if self.drafting is not None:  # the drafter reads the prompt only if and when it is first chosen
            self.drafting.begin(seq, config, rng, eager=False)
        self.choices = {"none": 0, LOOKUP: 0, DRAFTER: 0}

    def _drafter_value(self) -> float:
        """Expected tokens per second of a drafter round; inf before the first one (try it)."""
        if self._drafter_rounds is None:
            return float("inf")
        gain, calls, proposed = self._drafter_rounds
        per_call = self.costs.drafter_call() or 0.0
        return gain / (calls * per_call + self.costs.target(1 + proposed))

    def _could_pay(self) -> bool:
        """Whether the drafter could beat target-only decoding here even if it were always right: K drafted
        tokens, all accepted, give K + 1 tokens for K drafter steps and a (K + 1)-token verification."""
        step = self.costs.drafter_step()
        if step is None:
            return True  # not measured yet
        k = self.drafting.length.max_len
        return (k + 1) / (k * step + self.costs.target(k + 1)) > 1.0 / self.costs.target(1)

    def propose(self, seq: list[int], budget: int) -> Proposal:
        T = self.costs.target
        best, choice, m = 1.0 / T(1), "none", 0
        if self.lookup is not None:
            tokens, probs = self.lookup.candidates(seq, budget)
            if tokens:
                value, length = best_prefix(probs, T)
                if value > best:
                    best, choice, m = value, LOOKUP, length
        if self.drafting is not None:
            recheck = self._idle >= self._wait and choice != LOOKUP and self._could_pay()
            if recheck or self._drafter_value() > best:
                choice = DRAFTER
        self.choices[choice] += 1
        self._idle = 0 if choice == DRAFTER else self._idle + 1
        if choice == LOOKUP:
            return Proposal.point_masses(tokens[:m], LOOKUP)
        if choice == DRAFTER:
            return self.draft(seq, budget)
        return Proposal()

    def draft(self, seq: list[int], budget: int) -> Proposal:
        """The drafter's proposal, its cost measured."""
        calls, steps = self.drafting.counters["drafter_calls"], len(self.drafting.step_seconds)
        t0 = time.perf_counter()
        proposal = self.drafting.propose(seq, budget)
        self._draft_calls = self.drafting.counters["drafter_calls"] - calls
        self.costs.observe_drafter(self._draft_calls, time.perf_counter() - t0)
        for seconds in self.drafting.step_seconds[steps:]:
            self.costs.observe_drafter_step(seconds)
        return proposal

    def observe(self, seq: list[int], rnd: Round) -> None:
        self.costs.observe_target(rnd.tokens_in_call, rnd.target_seconds)
        if rnd.proposal.source == DRAFTER:
            now = np.array([rnd.accepted + 1.0, self._draft_calls, len(rnd.proposal)])
            self._drafter_rounds = now if self._drafter_rounds is None else 0.8 * self._drafter_rounds + 0.2 * now
            # every drafter round that does not pay doubles the wait before the next re-check; one that pays resets it
            pays = self._drafter_value() > 1.0 / self.costs.target(1)
            self._wait = self.explore_every if pays else min(2 * self._wait, MAX_WAIT)
        for p in (self.lookup, self.drafting):
            if p is not None:
                p.observe(seq, rnd)

    # -- what it measured, kept between runs (a one-prompt run need not re-measure a drafter that cannot pay) --
    def state(self) -> dict:
        rounds = None if self._drafter_rounds is None else self._drafter_rounds.tolist()
        return {"format": COSTS_FORMAT, "costs": self.costs.state(), "drafter_rounds": rounds, "wait": self._wait}

    def load_state(self, state: dict) -> None:
        """ValueError (nothing changed) unless it is a costs file with sane values."""
        if not isinstance(state, dict) or state.get("format") != COSTS_FORMAT:
            raise ValueError("not a costs file")
        rounds, wait = state["drafter_rounds"], state["wait"]
        if rounds is not None:
            rounds = np.asarray(rounds, dtype=np.float64)
            if rounds.shape != (3,) or not np.isfinite(rounds).all() or (rounds < 0).any():
                raise ValueError("damaged (drafter rounds)")
        if not isinstance(wait, int) or not 1 <= wait <= MAX_WAIT:
            raise ValueError("damaged (wait)")
        self.costs.load_state(state["costs"])
        self._drafter_rounds, self._wait = rounds, wait

    def end(self, weights_changed: bool = False, remember: bool = True) -> dict:
        stats = {"choices": dict(self.choices), "costs": self.costs.summary()}
        if self.lookup is not None:
            stats.update(self.lookup.end(weights_changed, remember))
        if self.drafting is not None:
            stats.update(self.drafting.end(weights_changed, remember))
        return stats
