package org.omnidraft.core;

import java.util.List;
import java.util.Map;

/**
 * The decision constants of the runtime (the hybrid's cost model and priors, the drafter's catch-up window,
 * lookup's walk and scorer) and the adaptation schedule: bundle.json's "policy" section, written at export
 * from the Python modules that define them (omnidraft/export/policy.py; omnidraft/bundle.py documents the
 * fields and their kinds). The core writes none of them itself: they come from the bundle.
 */
public final class Policy {
    // hybrid (runtime/hybrid.py)
    public final double exploreShare, carry, minCallS, maxCallS, priorC, priorSlope, ridge, costDecay, stepEma,
            roundsDecay;
    public final double[] roundsPrior; // hits, judged, rounds, proposed, calls
    // drafting (runtime/drafting.py, lookup_proposer.py)
    public final int catchupWindow, maxLookup;
    // lookup (runtime/lookup.py, lookup_proposer.py)
    public final int maxMatch, maxCandidates, maxOccurrences;
    public final double[] scorerPrior;
    public final double scorerLr, scorerFastLr, scorerMaxOffset;
    // adaptation (adaptation/online.py's AdaptConfig)
    public final int every, steps, buffer, holdoutEvery, holdout, replay, warmup;
    public final double adaptLr, guardMargin;

    /** The section as parsed JSON; IllegalArgumentException naming the first missing or out-of-range field. */
    public Policy(Map<String, Object> section) {
        Fields h = new Fields(section, "hybrid"), d = new Fields(section, "drafting"), l = new Fields(section, "lookup"),
                a = new Fields(section, "adaptation");
        exploreShare = h.share("explore_share");
        carry = h.positive("carry");
        minCallS = h.positive("min_call_s");
        maxCallS = h.positive("max_call_s");
        priorC = h.positive("prior_c");
        priorSlope = h.positive("prior_slope");
        ridge = h.positive("ridge");
        costDecay = h.share("cost_decay");
        stepEma = h.share("step_ema");
        roundsDecay = h.share("rounds_decay");
        roundsPrior = h.list("rounds_prior", 5);
        catchupWindow = d.count("catchup_window");
        maxLookup = d.count("max_lookup");
        maxMatch = l.count("max_match");
        maxCandidates = l.count("max_candidates");
        maxOccurrences = l.count("max_occurrences");
        scorerPrior = l.list("scorer_prior", LookupScorer.FEATURES);
        scorerLr = l.positive("scorer_lr");
        scorerFastLr = l.positive("scorer_fast_lr");
        scorerMaxOffset = l.positive("scorer_max_offset");
        adaptLr = a.positive("lr");
        every = a.count("every");
        steps = a.count("steps");
        buffer = a.count("buffer");
        holdoutEvery = a.count("holdout_every");
        holdout = a.count("holdout");
        replay = a.count("replay");
        warmup = a.count("warmup");
        guardMargin = a.positive("guard_margin");
    }

    /** One section's fields, each checked for its kind (bundle.py's POLICY_FIELDS). */
    private static final class Fields {
        final Map<String, Object> values;
        final String name;

        Fields(Map<String, Object> section, String name) {
            Object v = section == null ? null : section.get(name);
            if (!(v instanceof Map)) throw new IllegalArgumentException("policy." + name);
            this.values = Json.object(v);
            this.name = name;
        }

        private double number(String key) {
            Object v = values.get(key);
            if (!(v instanceof Number) || !Double.isFinite(((Number) v).doubleValue())) throw bad(key);
            return ((Number) v).doubleValue();
        }

        double positive(String key) {
            double v = number(key);
            if (!(v > 0)) throw bad(key);
            return v;
        }

        double share(String key) {
            double v = positive(key);
            if (v > 1) throw bad(key);
            return v;
        }

        int count(String key) {
            Object v = values.get(key);
            if (!(v instanceof Long || v instanceof Integer) || ((Number) v).longValue() < 1
                    || ((Number) v).longValue() > Integer.MAX_VALUE) throw bad(key);
            return ((Number) v).intValue();
        }

        double[] list(String key, int n) {
            Object v = values.get(key);
            if (!(v instanceof List) || ((List<?>) v).size() != n) throw bad(key);
            double[] out = new double[n];
            for (int i = 0; i < n; i++) {
                Object x = ((List<?>) v).get(i);
                if (!(x instanceof Number) || !Double.isFinite(((Number) x).doubleValue())) throw bad(key);
                out[i] = ((Number) x).doubleValue();
            }
            return out;
        }

        private IllegalArgumentException bad(String key) {
            return new IllegalArgumentException("policy." + name + "." + key);
        }
    }
}
