package org.pytorch.executorch;

/** STUB with the signatures of org.pytorch:executorch-android's EValue (compile checks only). */
public class EValue {
    public static EValue from(Tensor tensor) {
        throw new UnsupportedOperationException("stub");
    }

    public Tensor toTensor() {
        throw new UnsupportedOperationException("stub");
    }
}
