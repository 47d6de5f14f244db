package org.omnidraft.demo;

import java.util.List;
import org.omnidraft.core.AcceptanceHead;
import org.omnidraft.core.ModelRunner;
import org.pytorch.executorch.EValue;
import org.pytorch.executorch.Module;
import org.pytorch.executorch.Tensor;

/**
 * A bundle's .pte behind the core's runner interface (the phone twin of
 * omnidraft/runtime/executorch_runner.py). Inputs: input_ids [1, n], position_ids [1, n]
 * (int64), then, for a target of version 5, logit_rows [k] (int64: the rows whose logits it
 * returns, k <= maxLogitRows), then, for a drafter exported with an acceptance head, head_weight [F] and
 * head_bias [1], then (drafter_lora.pte) the LoRA tensors; outputs: logits [1, n, vocab] and, with the head, head_features [1, F]
 * and accept_prob [1]. The KV cache lives inside the program.
 */
public final class ExecuTorchRunner extends ModelRunner {
    private final Module module;
    private final AcceptanceHead head; // null for the target or a bundle without heads
    public List<Tensor> extraInputs = new java.util.ArrayList<>(); // drafter_lora.pte: the live LoRA tensors

    public ExecuTorchRunner(String ptePath, int vocabSize, int maxContext, int maxTokensPerCall, int maxLogitRows,
                            int ringSlack, AcceptanceHead head) {
        super(vocabSize, maxContext, maxTokensPerCall, maxLogitRows, ringSlack);
        this.module = Module.load(ptePath);
        this.head = head;
    }

    @Override
    protected float[][] run(List<Integer> input, int start, int nLogits) {
        int n = input.size();
        long[] ids = new long[n];
        long[] pos = new long[n];
        for (int i = 0; i < n; i++) {
            ids[i] = input.get(i);
            pos[i] = start + i;
        }
        long[] shape = {1, n};
        List<EValue> inputs = new java.util.ArrayList<>();
        inputs.add(EValue.from(Tensor.fromBlob(ids, shape)));
        inputs.add(EValue.from(Tensor.fromBlob(pos, shape)));
        int first = n - nLogits; // the first row whose logits come back
        if (maxLogitRows > 0) {
            long[] wanted = new long[nLogits];
            for (int r = 0; r < nLogits; r++) wanted[r] = first + r;
            inputs.add(EValue.from(Tensor.fromBlob(wanted, new long[] {nLogits})));
            first = 0; // the output holds only those rows
        }
        if (head != null) {
            inputs.add(EValue.from(Tensor.fromBlob(head.weight, new long[] {head.weight.length})));
            inputs.add(EValue.from(Tensor.fromBlob(head.bias, new long[] {1})));
        }
        for (Tensor t : extraInputs) inputs.add(EValue.from(t));
        EValue[] out = module.forward(inputs.toArray(new EValue[0]));
        float[] flat = out[0].toTensor().getDataAsFloatArray();
        float[][] rows = new float[nLogits][vocabSize];
        for (int r = 0; r < nLogits; r++) System.arraycopy(flat, (first + r) * vocabSize, rows[r], 0, vocabSize);
        if (head != null) {
            lastHeadFeatures = out[1].toTensor().getDataAsFloatArray();
            lastAcceptProb = out[2].toTensor().getDataAsFloatArray()[0];
        }
        return rows;
    }

    public void close() {
        module.destroy();
    }
}
