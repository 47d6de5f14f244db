package org.pytorch.executorch;

/**
 * STUB, for compile checks on machines without the Android library: same signatures as
 * org.pytorch:executorch-android's Module. Never packaged into the app (see ../README.md).
 */
public class Module {
    public static Module load(String modelPath) {
        throw new UnsupportedOperationException("stub: link org.pytorch:executorch-android");
    }

    public EValue[] forward(EValue... inputs) {
        throw new UnsupportedOperationException("stub");
    }

    public EValue[] execute(String methodName, EValue... inputs) {
        throw new UnsupportedOperationException("stub");
    }

    public void destroy() {}
}
