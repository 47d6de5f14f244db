package org.omnidraft.core;

import java.util.List;
import java.util.function.DoubleSupplier;

/**
 * Who proposes target tokens in a round: the seam between {@link SpeculativeLoop} and its proposers
 * (omnidraft/runtime/proposers.py). The loop asks for up to `budget` tokens given the committed sequence,
 * verifies them in one target call, and tells the proposer what was committed. Proposers here:
 * {@link DraftModel} (the drafter through the bridge), {@link LookupProposer} (continuations from the context
 * and the history) and {@link HybridProposer} (each round the option with the most expected tokens per second).
 */
public interface Proposer {
    /** A generation starts from the committed prompt `seq`. */
    void begin(List<Integer> seq, Sampler sampler, DoubleSupplier rng);

    /**
     * Up to `budget` target tokens to verify after `seq` (may be none). `after`: a proposal this one continues
     * (its tokens taken as if committed), or null; a proposer that cannot continue one returns nothing.
     */
    Proposal propose(List<Integer> seq, int budget, Proposal after);

    /** After every verified round; `seq` includes what it committed. */
    void observe(List<Integer> seq, Round round);

    /** The generation is over (also when it failed): what it learned for later generations is kept. */
    void end();

    /** What one verified round did (runtime/proposers.py's Round). */
    final class Round {
        public final Proposal proposal;
        public final int accepted; // proposed tokens the target accepted
        public final int next; // the target's own token after them (a correction or the bonus)
        public final List<Integer> committed; // the accepted tokens and `next`
        public final float[][] logits; // the target's rows: one per proposed token plus one
        public final int tokensInCall; // tokens the target call read
        public final double targetSeconds;

        public Round(Proposal proposal, int accepted, int next, List<Integer> committed, float[][] logits,
                     int tokensInCall, double targetSeconds) {
            this.proposal = proposal;
            this.accepted = accepted;
            this.next = next;
            this.committed = committed;
            this.logits = logits;
            this.tokensInCall = tokensInCall;
            this.targetSeconds = targetSeconds;
        }

        /** Tokens the drafter proposed (after a lookup prefix, if any). */
        public int drafterTokens() {
            return proposal.size() - proposal.lookupPrefix();
        }
    }
}
