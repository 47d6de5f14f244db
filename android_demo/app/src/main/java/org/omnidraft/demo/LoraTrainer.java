package org.omnidraft.demo;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.omnidraft.core.TrainingExample;
import org.pytorch.executorch.EValue;
import org.pytorch.executorch.Tensor;
import org.pytorch.executorch.training.SGD;
import org.pytorch.executorch.training.TrainingModule;

/**
 * On-device LoRA steps through the bundle's drafter_train.pte (the phone twin of
 * omnidraft/adaptation/learners.py's ExecuTorchLearner): one forward+backward of the hybrid
 * loss on a padded window, then ExecuTorch's SGD on the LoRA tensors. The same live tensors
 * are the extra inputs of drafter_lora.pte, so the next drafter call already uses the update.
 */
public final class LoraTrainer {
    private final TrainingModule module;
    private final Map<String, Tensor> params;
    private final SGD sgd;
    private final List<Tensor> loraInputs = new ArrayList<>();
    public final int window;
    public final int mapped;
    public int steps;

    public LoraTrainer(String trainPte, List<String> loraNames, int window, int mapped, double lr) {
        this.module = TrainingModule.load(trainPte);
        this.window = window;
        this.mapped = mapped;
        TrainingExample.Window empty = new TrainingExample.Window(window, mapped);
        module.executeForwardBackward("forward", inputs(empty)); // materializes the parameters
        this.params = module.namedParameters("forward");
        for (String name : loraNames) {
            Tensor t = params.get("model." + name);
            if (t == null) throw new IllegalStateException("the training program has no LoRA tensor " + name);
            loraInputs.add(t);
        }
        this.sgd = SGD.create(params, lr, 0, 0, 0, false);
    }

    /** The LoRA tensors in bundle.json's lora_inputs order (drafter_lora.pte's extra inputs). */
    public List<Tensor> loraInputs() {
        return loraInputs;
    }

    /** One SGD step on one example's window; returns the loss. */
    public float step(TrainingExample example) {
        EValue[] out = module.executeForwardBackward("forward", inputs(example.window(window)));
        sgd.step(module.namedGradients("forward"));
        steps++;
        return out[0].toTensor().getDataAsFloatArray()[0];
    }

    private static EValue[] inputs(TrainingExample.Window w) {
        long[] row = {w.window};
        return new EValue[] {
            EValue.from(Tensor.fromBlob(w.ids, new long[] {1, w.window})),
            EValue.from(Tensor.fromBlob(w.klRows, row)),
            EValue.from(Tensor.fromBlob(w.klTarget, new long[] {w.window, w.mapped})),
            EValue.from(Tensor.fromBlob(w.klWeight, row)),
            EValue.from(Tensor.fromBlob(w.nllRows, row)),
            EValue.from(Tensor.fromBlob(w.nllLabels, row)),
            EValue.from(Tensor.fromBlob(w.nllWeight, row)),
        };
    }

    public void close() {
        module.destroy();
    }
}
