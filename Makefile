# Two commands do everything on a fresh machine: `make demo` and `make test`.
# A virtual environment in .venv gets the CPU build of torch (a local file on our machines, about a
# minute); a machine that already has torch importable from python3 (e.g. a GPU box with its own CUDA
# build) keeps it: the venv then sees the system site-packages instead.

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	@if $(PYTHON) -c "import torch" 2>/dev/null; then \
		echo "using the torch that $(PYTHON) already has"; \
		$(PYTHON) -m venv --system-site-packages $(VENV); \
	else \
		$(PYTHON) -m venv $(VENV); \
		$(BIN)/python -m pip install -q $(TORCH_SPEC); \
	fi
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/islands demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_simulator.py
	$(BIN)/python benchmarks/bench_trainer.py

clean:
	rm -rf $(VENV) build *.egg-info
