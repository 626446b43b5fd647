# Two set-up commands that work on a fresh machine: `make figures` and `make test`.
# Both create (or reuse) .venv and install tdyn with pinned versions (constraints.txt).
PY       ?= python3
VENV     := .venv
BIN      := $(VENV)/bin
STAMP    := $(VENV)/.installed
export MPLBACKEND := Agg
export JAX_PLATFORMS := cpu
export PYTHONHASHSEED := 0

.PHONY: install test test-slow bench figures figures-full docs clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first, alone and pinned (2.13.0, CPU): installed with the rest, a dependency's looser torch
	# requirement could pull a newer multi-GB CUDA build instead of the CPU wheel
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[dev,cluster]"
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

bench: $(STAMP)
	$(BIN)/python -m pytest -q -s -o addopts="" -m benchmark --benchmark-only

figures: $(STAMP)
	$(BIN)/tdyn reproduce --quick --jobs 2

figures-full: $(STAMP)
	$(BIN)/tdyn reproduce

# the API reference from the docstrings (pdoc) into docs/api/ (not committed)
docs: $(STAMP)
	$(BIN)/python docs/build_api.py docs/api

clean:
	rm -rf $(VENV) figures/out docs/api .pytest_cache
