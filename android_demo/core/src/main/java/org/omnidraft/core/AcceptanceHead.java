package org.omnidraft.core;

/**
 * The acceptance head's weights (omnidraft/runtime/acceptance.py). The exported drafter graph
 * takes them as inputs (head_weight, head_bias) and returns P(accept) for the token it drafts;
 * this class holds them on the phone and computes the same probability from the graph's
 * head_features output when needed.
 */
public final class AcceptanceHead {
    public final float[] weight;
    public final float[] bias = new float[1];

    public AcceptanceHead(int features) {
        weight = new float[features];
        weight[features - 2] = 6.0f; // before training: sigmoid(6 top1 - 3)
        bias[0] = -3.0f;
    }

    public double prob(float[] features) {
        double z = bias[0];
        for (int i = 0; i < weight.length; i++) z += (double) features[i] * weight[i];
        return 1.0 / (1.0 + Math.exp(-z));
    }
}
