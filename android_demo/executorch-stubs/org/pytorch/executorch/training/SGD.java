package org.pytorch.executorch.training;

import java.util.Map;
import org.pytorch.executorch.Tensor;

/** STUB with the signatures of org.pytorch:executorch-android's SGD optimizer (compile checks only). */
public class SGD {
    public static SGD create(Map<String, Tensor> namedParameters, double learningRate, double momentum,
                             double dampening, double weightDecay, boolean nesterov) {
        throw new UnsupportedOperationException("stub");
    }

    public void step(Map<String, Tensor> namedGradients) {
        throw new UnsupportedOperationException("stub");
    }
}
