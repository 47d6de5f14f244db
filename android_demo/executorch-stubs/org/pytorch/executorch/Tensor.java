package org.pytorch.executorch;

/** STUB with the signatures of org.pytorch:executorch-android's Tensor (compile checks only). */
public abstract class Tensor {
    public static Tensor fromBlob(long[] data, long[] shape) {
        throw new UnsupportedOperationException("stub");
    }

    public static Tensor fromBlob(float[] data, long[] shape) {
        throw new UnsupportedOperationException("stub");
    }

    public abstract long[] shape();

    public float[] getDataAsFloatArray() {
        throw new UnsupportedOperationException("stub");
    }
}
