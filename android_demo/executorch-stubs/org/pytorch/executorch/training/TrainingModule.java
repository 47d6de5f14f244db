package org.pytorch.executorch.training;

import java.util.Map;
import org.pytorch.executorch.EValue;
import org.pytorch.executorch.Tensor;

/** STUB with the signatures of org.pytorch:executorch-android's TrainingModule (compile checks only). */
public class TrainingModule {
    public static TrainingModule load(String modelPath) {
        throw new UnsupportedOperationException("stub: link org.pytorch:executorch-android");
    }

    public EValue[] executeForwardBackward(String methodName, EValue... inputs) {
        throw new UnsupportedOperationException("stub");
    }

    public Map<String, Tensor> namedParameters(String methodName) {
        throw new UnsupportedOperationException("stub");
    }

    public Map<String, Tensor> namedGradients(String methodName) {
        throw new UnsupportedOperationException("stub");
    }

    public void destroy() {}
}
