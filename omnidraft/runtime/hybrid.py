"""The hybrid policy: each round, the proposal with the most expected tokens per second.

Options each round (tokens committed = accepted + 1 in every case):
  - nothing: a plain target step, 1 token for T(1);
  - a lookup prefix of m tokens: 1 + E_m tokens for T(m + 1), with E_m = sum_i prod_{j<=i} P_j
    from the lookup scorer; lookup costs an index query and no model call;
  - the drafter: 1 + A tokens for K drafter steps and T(1 + M), where A, M and K are the
    drafter's recent accepted tokens, proposed tokens and calls per round;
  - a chain, a lookup prefix of m tokens continued by the drafter: 1 + E_m + S_m A tokens
    (S_m = prod_{j<=m} P_j: the drafter's tokens count only if the whole prefix is accepted)
    for K drafter steps and T(1 + m + M).
T(n), the target's call time for n tokens, and the drafter's step time are measured on the
machine at hand from the loop's own calls (CallCosts). What the drafter reads before it
can draft (the prompt, text committed while it was idle: "catching up") is measured apart
and not charged to a draft round: it is the price of having the drafter at all, paid
once per text, not a cost of drafting now.

A fresh state starts from priors (the drafter is tried early); the drafter's figures are
then running averages over its rounds, and what it showed in earlier runs counts for at
most CARRY rounds in a new generation, so a new prompt is judged on its own rounds.
A drafter not chosen is re-checked now and then, in place of nothing or of a lookup prefix
expected to yield less than one token (a chain when lookup expects more): once the time
spent since its last round, times `explore_share`, covers what a re-check costs (reading
the text it has not seen, its steps, the longer verification). Re-checks so cost at most
that share of the time whatever the machine, and come often where they are cheap.
A drafter whose measured step is so slow that even perfect acceptance could not beat
target-only decoding ((K + 1) tokens for K steps and a (K + 1)-token verification) is not
re-checked at all: on such a machine the hybrid is lookup alone.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np

from .drafting import DRAFTER, DraftModel
from .lookup_proposer import LOOKUP, LookupProposer
from .proposers import Proposal, Round
from .stats import HybridStats, ProposerStats

MIN_CALL_S, MAX_CALL_S = 5e-5, 60.0  # a plausible model call: 0.05 ms to a minute
EXPLORE_SHARE = 0.02  # the share of its time the hybrid may spend re-checking a drafter it does not use
CARRY = 4.0  # earlier runs' drafter rounds count as at most this many rounds in a new generation
COSTS_FORMAT = "omnidraft-hybrid-costs-2"
CHAIN = "chain"


class CallCosts:
    """Seconds per target call of n tokens, T(n) = a + b (n - 1) (least squares with decay), and per
    drafter step; the drafter's catching up (seconds per extra token read in a call) measured apart.

    fixed=(a, b, drafter step) pins the costs (reproducible tests and what-if runs). Before anything is
    measured only ratios matter: T(n) = 1 + 0.1 (n - 1) and a drafter step of 0.2 target steps (priors).
    """

    PRIOR_C = 0.2
    PRIOR_SLOPE = 0.1
    RIDGE = 8.0
    DECAY = 0.97  # the target fit's weight on earlier calls, per call
    STEP_EMA = 0.2  # the newest drafter call's weight in its running step and catch-up costs

    def __init__(self, decay: float = DECAY, fixed: tuple[float, float, float] | None = None):
        self.decay = decay
        self.fixed = fixed
        self._sums = np.zeros(5)  # weights, n, s, n*n, n*s
        self._step: float | None = None  # EMA of seconds per one-token drafter step
        self._catchup: float | None = None  # EMA of extra seconds per token read in a catching-up call
        self._smallest: float | None = None  # the quickest drafter call seen: a bound on its step until one is timed

    def observe_target(self, n: int, seconds: float) -> None:
        if MIN_CALL_S <= seconds <= MAX_CALL_S:
            self._sums = self.decay * self._sums + np.array([1.0, n, seconds, n * n, n * seconds])

    def observe_drafter(self, calls: list[tuple[int, float]]) -> None:
        """A draft's model calls as (tokens, seconds): one-token steps, and the first call's catching up."""
        for n, seconds in calls:
            if not MIN_CALL_S <= seconds <= MAX_CALL_S:
                continue
            self._smallest = seconds if self._smallest is None else min(self._smallest, seconds)
            if n == 1:
                self._step = seconds if self._step is None else (1 - self.STEP_EMA) * self._step + self.STEP_EMA * seconds
            elif self._step is not None:
                per = max(0.0, seconds - self._step) / (n - 1)
                self._catchup = per if self._catchup is None else (1 - self.STEP_EMA) * self._catchup + self.STEP_EMA * per

    def catchup(self, tokens: int) -> float:
        """Seconds to read `tokens` the drafter has not seen, beyond a step (a prior of a tenth of a step each)."""
        measured = self._catchup is not None and not self.fixed  # pinned costs pin this too
        per = self._catchup if measured else self.PRIOR_SLOPE * self.drafter_step()
        return per * max(tokens - 1, 0)

    def drafter_step(self) -> float:
        if self.fixed:
            return self.fixed[2]
        if self._step is not None:
            return self._step
        prior = self.PRIOR_C * self.target(1)
        return prior if self._smallest is None else min(prior, self._smallest)

    @property
    def measured(self) -> bool:
        return self.fixed is not None or (self._sums[0] > 0 and self._step is not None)

    def target(self, n: int) -> float:
        if self.fixed:
            a, b, _ = self.fixed
            return a + b * (n - 1)
        w, sn, ss, snn, sns = self._sums
        if w <= 0:
            return 1.0 + self.PRIOR_SLOPE * (n - 1)  # nothing measured yet: only ratios matter
        mean_x, mean_s = sn / w - 1.0, ss / w  # x = n - 1
        sxx = max(snn / w - (sn / w) ** 2, 0.0) * w
        sxy = (sns / w - (sn / w) * mean_s) * w
        # ridge toward the prior slope (each extra token a tenth of a step), worth RIDGE pseudo-calls: a few
        # noisy calls of similar sizes (a run's first rounds) cannot tilt the line into nonsense
        b0 = self.PRIOR_SLOPE * mean_s / (1.0 + self.PRIOR_SLOPE * mean_x)
        slope = max((sxy + self.RIDGE * b0) / (sxx + self.RIDGE), 0.0)
        return max(mean_s + slope * (n - 1 - mean_x), MIN_CALL_S)

    def state(self) -> dict:
        return {"sums": self._sums.tolist(), "drafter_step": self._step, "catchup_per_token": self._catchup}

    def load_state(self, state: dict) -> None:
        """ValueError (nothing changed) unless every field is a physically plausible measurement."""
        sums = np.asarray(state["sums"], dtype=np.float64)
        step, catchup = state["drafter_step"], state["catchup_per_token"]
        if sums.shape != (5,) or not np.isfinite(sums).all() or (sums[:4] < 0).any():
            raise ValueError("damaged (target costs)")
        for v in (step, catchup):
            if v is not None and (not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0):
                raise ValueError("damaged (drafter costs)")
        if step is not None and not MIN_CALL_S <= step <= MAX_CALL_S:
            raise ValueError(f"implausible (a drafter step of {1000 * step:.4g} ms)")
        if catchup is not None and catchup > MAX_CALL_S:
            raise ValueError("implausible (drafter catch-up cost)")
        old = self._sums, self._step, self._catchup
        self._sums, self._step, self._catchup = sums, step, catchup
        if sums[0] > 0:
            t1, t16 = self.target(1), self.target(16)
            w, sn = sums[0], sums[1]
            if not (MIN_CALL_S < t1 <= MAX_CALL_S and t16 <= MAX_CALL_S and 1 <= sn / w <= 4096):
                self._sums, self._step, self._catchup = old
                raise ValueError(f"implausible (a target step of {1000 * t1:.4g} ms)")

    def summary(self) -> dict:
        return {"target_step_ms": 1000 * self.target(1), "target_verify_ms_per_extra_token":
                1000 * (self.target(2) - self.target(1)), "drafter_step_ms": 1000 * self.drafter_step(),
                "drafter_catchup_ms_per_token": None if self._catchup is None else 1000 * self._catchup}


@dataclass
class DrafterRounds:
    """What the drafter's recent rounds showed: its per-token acceptance, and its proposed tokens and
    calls per round (running sums that decay by DECAY per round).

    The acceptance is counted per judged token (a round whose first token is rejected judged one token,
    not all it proposed) from a prior worth `judged` tokens, so one unlucky round cannot bench the drafter.
    """

    hits: float = 1.4  # the prior: 0.35 per judged token, the shipped small drafter's acceptance on open-ended
    judged: float = 4.0  # text (benchmarks/RESULTS.md, "Which drafter by default"), worth 4 judged tokens
    rounds: float = 1.0
    proposed: float = 1.5
    calls: float = 1.5
    DECAY = 0.9

    def add(self, accepted: int, proposed: int, calls: int) -> None:
        d = self.DECAY
        self.hits = d * self.hits + accepted
        self.judged = d * self.judged + min(accepted + 1, proposed)
        self.rounds = d * self.rounds + 1.0
        self.proposed = d * self.proposed + proposed
        self.calls = d * self.calls + calls

    def means(self) -> tuple[float, float, float]:
        """(expected accepted, proposed, calls) per round."""
        alpha = min(self.hits / self.judged, 1.0)
        proposed = self.proposed / self.rounds
        accepted = proposed if alpha >= 1.0 else alpha * (1.0 - alpha**proposed) / (1.0 - alpha)
        return accepted, proposed, self.calls / self.rounds

    def values(self) -> list[float]:
        return [self.hits, self.judged, self.rounds, self.proposed, self.calls]

    def carried(self, limit: float = CARRY) -> "DrafterRounds":
        """The same averages, worth at most `limit` rounds (what earlier runs tell a new one)."""
        scale = min(1.0, limit / self.rounds)
        return DrafterRounds(*(v * scale for v in self.values()))

    @classmethod
    def checked(cls, values) -> "DrafterRounds":
        hits, judged, rounds, proposed, calls = (float(v) for v in values)
        if not all(math.isfinite(v) for v in (hits, judged, rounds, proposed, calls)) or min(
                hits, judged, rounds, proposed, calls) < 0 or not 0 < rounds <= 1e6 or judged <= 0:
            raise ValueError("damaged (drafter rounds)")
        if hits > judged + 1e-9 or proposed / rounds > 256 or calls / rounds > 256:
            raise ValueError("implausible (drafter rounds)")
        return cls(hits, judged, rounds, proposed, calls)


def options(probs: np.ndarray, T, drafter: tuple[float, float, float, float] | None,
            budget: int) -> list[tuple[float, str, int]]:
    """(expected tokens per second, choice, lookup prefix length) of every option of a round.

    probs: lookup's P(accept) per continuation token; T(n): seconds of a target call of n tokens;
    drafter: its (accepted, proposed, calls) per round and seconds per call, or None when it cannot
    propose; budget: tokens the round may propose (chains need room for a drafter token; 0: no chains).
    """
    probs = np.asarray(probs, dtype=np.float64)
    out = [(1.0 / T(1), "none", 0)]
    survive = np.cumprod(probs)
    expected = np.cumsum(survive)
    for m in range(1, len(probs) + 1):
        out.append(((1.0 + expected[m - 1]) / T(m + 1), LOOKUP, m))
    if drafter is None:
        return out
    accepted, proposed, calls, step = drafter
    drafting = calls * step
    out.append(((1.0 + accepted) / (drafting + T(1 + proposed)), DRAFTER, 0))
    for m in range(1, min(len(probs), budget - 1) + 1):
        gain = 1.0 + expected[m - 1] + survive[m - 1] * accepted
        out.append((gain / (drafting + T(1 + m + proposed)), CHAIN, m))
    return out


def measurements(state: dict, fixed=None) -> tuple[CallCosts, DrafterRounds]:
    """What a costs file holds (Hybrid.state()): ValueError unless it is one, with plausible values."""
    if not isinstance(state, dict) or state.get("format") != COSTS_FORMAT:
        raise ValueError("not a costs file of this version")
    rounds = state["drafter_rounds"]
    if not isinstance(rounds, list) or len(rounds) != 5:
        raise ValueError("damaged (drafter rounds)")
    costs = CallCosts(fixed=fixed)
    costs.load_state(state["costs"])
    return costs, DrafterRounds.checked(rounds)


class Hybrid:
    def __init__(self, lookup: LookupProposer | None, drafting: DraftModel | None, costs: CallCosts | None = None,
                 rounds: DrafterRounds | None = None, explore_share: float = EXPLORE_SHARE, chaining: bool = True):
        if lookup is None and drafting is None:
            raise ValueError("the hybrid needs lookup, a drafter or both")
        self.lookup = lookup
        self.drafting = drafting
        self.costs = costs or CallCosts()
        self.explore_share = explore_share
        self.chaining = chaining
        self.rounds = rounds or DrafterRounds()
        self._idle_s = 0.0  # seconds of rounds since the drafter last proposed
        self.choices = {}
        self._learn = True
        self._kept: tuple | None = None  # (costs, rounds) as the generation began

    def begin(self, seq, config, rng, learn: bool = True) -> None:
        """learn=False: what the round measures steers this generation only (put back at its end)."""
        if self.lookup is not None:
            self.lookup.begin(seq, config, rng, learn)
        self._learn = learn
        self._kept = (copy.deepcopy(self.costs), self.rounds)
        self.rounds = self.rounds.carried()
        self._idle_s = 0.0
        if self.drafting is not None:  # it reads the prompt now only if it is expected to pay (else when first used)
            self.drafting.begin(seq, config, rng, learn, read_prompt=False)
            if self._could_pay() and self.drafter_value() >= 1.0 / self.costs.target(1):
                self.drafting.read_prompt(recent_only=True)
        self.choices = {"none": 0, LOOKUP: 0, DRAFTER: 0, CHAIN: 0}

    # -- what each option is expected to give ------------------------------------------------
    def drafter_value(self) -> float:
        """Expected tokens per second of a round in which the drafter alone proposes."""
        accepted, proposed, calls = self.rounds.means()
        return (1.0 + accepted) / (calls * self.costs.drafter_step() + self.costs.target(1 + proposed))

    def _recheck_due(self) -> bool:
        """Whether the time since the drafter's last round pays for re-checking it now (see the module doc)."""
        _, proposed, calls = self.rounds.means()
        T = self.costs.target
        cost = calls * self.costs.drafter_step() + T(1 + proposed) - T(1)
        budget = self.explore_share * self._idle_s
        return budget >= cost and budget >= cost + self.costs.catchup(self.drafting.unread())

    def _could_pay(self) -> bool:
        """Whether the drafter could beat target-only decoding here even if it were always right: K drafted
        tokens, all accepted, give K + 1 tokens for K drafter steps and a (K + 1)-token verification."""
        if not self.costs.measured:
            return True
        k = self.drafting.length.max_len
        step, T = self.costs.drafter_step(), self.costs.target
        return (k + 1) / (k * step + T(k + 1)) > 1.0 / T(1)

    def _options(self, probs: np.ndarray, budget: int) -> list[tuple[float, str, int]]:
        drafter = None
        if self.drafting is not None and self._could_pay():
            drafter = (*self.rounds.means(), self.costs.drafter_step())
        return options(probs, self.costs.target, drafter, budget if self.chaining else 0)

    def propose(self, seq: list[int], budget: int, after: Proposal | None = None) -> Proposal:
        if after is not None:
            return Proposal()  # the hybrid continues nothing: it decides whole rounds
        looked = self.lookup.propose(seq, budget) if self.lookup is not None else Proposal()
        probs = np.asarray(looked.accept_probs or [], dtype=np.float64)
        value, choice, m = max(self._options(probs, budget), key=lambda o: o[0])
        if self.drafting is not None and choice in ("none", LOOKUP) and self._recheck_due() and self._could_pay():
            expected = float(np.cumsum(np.cumprod(probs[:m]))[-1]) if m else 0.0
            choice = CHAIN if (m and expected >= 1.0 and self.chaining and budget > m) else DRAFTER
            if choice == DRAFTER:
                m = 0
        self.choices[choice] += 1
        if choice == "none":
            return Proposal()
        looked.truncate(m)
        if choice == LOOKUP:
            return looked
        drafted = self.drafting.propose(seq, budget - m, after=looked if m else None)
        return looked.then(drafted) if m else drafted

    def observe(self, seq: list[int], rnd: Round) -> None:
        self.costs.observe_target(rnd.tokens_in_call, rnd.target_seconds)
        offset, mine = rnd.part(DRAFTER)
        if rnd.proposal.calls:
            self.costs.observe_drafter(rnd.proposal.calls)
        if mine and rnd.accepted >= offset:  # the drafter's part was judged on its own (its prefix accepted)
            self.rounds.add(min(rnd.accepted - offset, mine), mine, len(rnd.proposal.calls))
        # time since the drafter's last round, as the cost model prices the rounds (lookup costs no model call)
        self._idle_s = 0.0 if mine else self._idle_s + self.costs.target(rnd.tokens_in_call)
        for p in (self.lookup, self.drafting):
            if p is not None:
                p.observe(seq, rnd)

    # -- what it measured, kept between runs (a one-prompt run starts from what earlier runs saw) --
    def state(self) -> dict:
        return {"format": COSTS_FORMAT, "costs": self.costs.state(), "drafter_rounds": self.rounds.values()}

    def end(self, weights_changed: bool = False, remember: bool = True) -> ProposerStats:
        accepted, proposed, calls = self.rounds.means()
        mine = HybridStats(dict(self.choices), self.costs.summary(),
                           {"accepted": accepted, "proposed": proposed, "calls": calls,
                            "tokens_per_s": self.drafter_value()})
        stats = ProposerStats(hybrid=mine)
        if not (remember and self._learn) and self._kept is not None:
            self.costs, self.rounds = self._kept
        if self.lookup is not None:
            stats.lookup = self.lookup.end(weights_changed, remember).lookup
        if self.drafting is not None:
            stats.drafter = self.drafting.end(weights_changed, remember).drafter
        return stats
