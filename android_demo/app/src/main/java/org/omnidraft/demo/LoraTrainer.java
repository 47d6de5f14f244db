package org.omnidraft.demo;

import java.util.ArrayList;
import java.util.List;
import org.omnidraft.core.TrainingExample;
import org.pytorch.executorch.EValue;
import org.pytorch.executorch.Module;
import org.pytorch.executorch.Tensor;

/**
 * On-device LoRA steps through the bundle's drafter_train.pte (the phone twin of
 * omnidraft/adaptation/learners.py's ExecuTorchLearner). The program is one whole update step:
 * the LoRA tensors, their Adam moments and the step number go in with a padded batch of windows,
 * the updated tensors come out (gradients clipped, then Adam: the Python learners' rule, so the
 * phone has no optimizer of its own). The LoRA list is also drafter_lora.pte's extra inputs
 * (the runner holds this very list), so the next drafter call already uses the update.
 */
public final class LoraTrainer {
    private final Module module;
    private final List<Tensor> lora = new ArrayList<>();
    private final List<Tensor> expAvg = new ArrayList<>();
    private final List<Tensor> expAvgSq = new ArrayList<>();
    public final int window;
    public final int batch;
    public final int mapped;
    public final double lr;
    private final int warmup; // steps over which the learning rate ramps up (the bundle's policy)
    public int steps;

    public LoraTrainer(String trainPte, int loraInputs, int window, int batch, int mapped, double lr, int warmup) {
        this.module = Module.load(trainPte);
        this.window = window;
        this.batch = batch;
        this.mapped = mapped;
        this.lr = lr;
        this.warmup = warmup;
        EValue[] fresh = module.execute("lora_init");
        if (fresh.length != loraInputs) {
            throw new IllegalStateException("the training program has " + fresh.length + " LoRA tensors, the bundle lists "
                    + loraInputs);
        }
        for (EValue e : fresh) {
            Tensor t = e.toTensor();
            lora.add(copy(t));
            expAvg.add(Tensor.fromBlob(new float[numel(t.shape())], t.shape()));
            expAvgSq.add(Tensor.fromBlob(new float[numel(t.shape())], t.shape()));
        }
    }

    /** The LoRA tensors in bundle.json's lora_inputs order (drafter_lora.pte's extra inputs); updated in place. */
    public List<Tensor> loraInputs() {
        return lora;
    }

    /** One update step on the pooled loss of 1..batch examples; returns the loss. */
    public float step(List<TrainingExample> examples) {
        if (examples.isEmpty() || examples.size() > batch) {
            throw new IllegalArgumentException("a training step takes 1 to " + batch + " examples");
        }
        int n = lora.size();
        List<EValue> in = new ArrayList<>();
        for (List<Tensor> state : List.of(lora, expAvg, expAvgSq)) for (Tensor t : state) in.add(EValue.from(t));
        in.add(EValue.from(Tensor.fromBlob(new float[] {steps + 1}, new long[0])));
        double rate = org.omnidraft.core.OnlineSchedule.lrAt(lr, steps, warmup);
        in.add(EValue.from(Tensor.fromBlob(new float[] {(float) rate}, new long[0])));
        in.addAll(batchInputs(examples));
        EValue[] out = module.execute("forward", in.toArray(new EValue[0]));
        for (int i = 0; i < n; i++) { // copies: the program reuses its output memory on the next call
            lora.set(i, copy(out[3 + i].toTensor()));
            expAvg.set(i, copy(out[3 + n + i].toTensor()));
            expAvgSq.set(i, copy(out[3 + 2 * n + i].toTensor()));
        }
        steps++;
        return out[0].toTensor().getDataAsFloatArray()[0];
    }

    /**
     * `measure` run with the drafter's LoRA tensors zeroed (the drafter without its adapter), then restored:
     * the guard's floor.
     */
    public double withoutAdapter(java.util.function.DoubleSupplier measure) {
        List<float[]> saved = new ArrayList<>();
        for (Tensor t : lora) saved.add(t.getDataAsFloatArray().clone());
        for (int i = 0; i < lora.size(); i++) lora.set(i, Tensor.fromBlob(new float[saved.get(i).length], lora.get(i).shape()));
        try {
            return measure.getAsDouble();
        } finally {
            for (int i = 0; i < lora.size(); i++) lora.set(i, Tensor.fromBlob(saved.get(i), lora.get(i).shape()));
        }
    }

    /** Everything a step changes: the LoRA tensors, their Adam moments and the step count (copies). */
    public static final class State {
        final List<Tensor> lora = new ArrayList<>(), expAvg = new ArrayList<>(), expAvgSq = new ArrayList<>();
        final int steps;

        State(LoraTrainer t) {
            for (Tensor x : t.lora) lora.add(copy(x));
            for (Tensor x : t.expAvg) expAvg.add(copy(x));
            for (Tensor x : t.expAvgSq) expAvgSq.add(copy(x));
            steps = t.steps;
        }
    }

    public State state() {
        return new State(this);
    }

    /** Back to a saved state (the guard's rollback); the drafter's inputs list follows, as after a step. */
    public void restore(State s) {
        for (int i = 0; i < lora.size(); i++) {
            lora.set(i, copy(s.lora.get(i)));
            expAvg.set(i, copy(s.expAvg.get(i)));
            expAvgSq.set(i, copy(s.expAvgSq.get(i)));
        }
        steps = s.steps;
    }

    /** The program's batch inputs: ids [B, W], then flat rows into B*W (missing examples all padding, weight 0). */
    private List<EValue> batchInputs(List<TrainingExample> examples) {
        int rows = batch * window;
        long[] ids = new long[rows], klRows = new long[rows], nllRows = new long[rows], nllLabels = new long[rows];
        float[] klTarget = new float[rows * mapped], klWeight = new float[rows], nllWeight = new float[rows];
        for (int b = 0; b < examples.size(); b++) {
            TrainingExample.Window w = examples.get(b).window(window);
            int at = b * window;
            System.arraycopy(w.ids, 0, ids, at, window);
            for (int i = 0; i < window; i++) {
                klRows[at + i] = w.klRows[i] + at;
                nllRows[at + i] = w.nllRows[i] + at;
            }
            System.arraycopy(w.nllLabels, 0, nllLabels, at, window);
            System.arraycopy(w.klTarget, 0, klTarget, at * mapped, window * mapped);
            System.arraycopy(w.klWeight, 0, klWeight, at, window);
            System.arraycopy(w.nllWeight, 0, nllWeight, at, window);
        }
        long[] flat = {rows};
        return List.of(
                EValue.from(Tensor.fromBlob(ids, new long[] {batch, window})),
                EValue.from(Tensor.fromBlob(klRows, flat)),
                EValue.from(Tensor.fromBlob(klTarget, new long[] {rows, mapped})),
                EValue.from(Tensor.fromBlob(klWeight, flat)),
                EValue.from(Tensor.fromBlob(nllRows, flat)),
                EValue.from(Tensor.fromBlob(nllLabels, flat)),
                EValue.from(Tensor.fromBlob(nllWeight, flat)));
    }

    private static Tensor copy(Tensor t) {
        return Tensor.fromBlob(t.getDataAsFloatArray().clone(), t.shape());
    }

    private static int numel(long[] shape) {
        long n = 1;
        for (long d : shape) n *= d;
        return (int) n;
    }

    public void close() {
        module.destroy();
    }
}
