"""The policy section of bundle.json: the decision constants of the runtime (the hybrid's cost model and
priors, the drafter's catch-up window, lookup's walk and scorer) and the adaptation schedule, taken from
the modules that define them, so that the app reads them from the bundle instead of copying them
(bundle.py documents and checks the section; android_demo's Policy.java reads it)."""

from __future__ import annotations

from ..adaptation.online import AdaptConfig
from ..runtime import lookup
from ..runtime.drafting import CATCHUP_WINDOW
from ..runtime.hybrid import CARRY, EXPLORE_SHARE, MAX_CALL_S, MIN_CALL_S, CallCosts, DrafterRounds
from ..runtime.lookup_proposer import PRIOR, LookupProposer, LookupScorer


def policy() -> dict:
    adapt = AdaptConfig()
    return {
        "hybrid": {"explore_share": EXPLORE_SHARE, "carry": CARRY, "min_call_s": MIN_CALL_S, "max_call_s": MAX_CALL_S,
                   "prior_c": CallCosts.PRIOR_C, "prior_slope": CallCosts.PRIOR_SLOPE, "ridge": CallCosts.RIDGE,
                   "cost_decay": CallCosts.DECAY, "step_ema": CallCosts.STEP_EMA, "rounds_decay": DrafterRounds.DECAY,
                   "rounds_prior": DrafterRounds().values()},
        "drafting": {"catchup_window": CATCHUP_WINDOW, "max_lookup": LookupProposer.MAX_LEN},
        "lookup": {"max_match": lookup.MAX_MATCH, "max_candidates": lookup.MAX_CANDIDATES,
                   "max_occurrences": lookup.MAX_OCCURRENCES, "scorer_prior": [float(w) for w in PRIOR],
                   "scorer_lr": LookupScorer.LR, "scorer_fast_lr": LookupScorer.FAST_LR,
                   "scorer_max_offset": LookupScorer.MAX_OFFSET},
        "adaptation": {"lr": adapt.lr, "every": adapt.every, "steps": adapt.steps, "buffer": adapt.buffer,
                       "holdout_every": adapt.holdout_every, "holdout": adapt.holdout, "replay": adapt.replay,
                       "warmup": adapt.warmup, "guard_margin": adapt.guard_margin},
    }
