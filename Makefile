# Two commands do everything on a fresh machine: `make demo` and `make test`.
# A virtual environment in .venv gets the CPU build of torch (a local file on our machines, about a
# minute); a machine that already has torch importable from python3 (e.g. a GPU box with its own CUDA
# build) keeps it: the venv then sees the system site-packages instead.
# `make docs` builds the documentation site into site/ (`.venv/bin/mkdocs serve` to read it live),
# after retaking the live page's screenshots (`make docs-screenshots`).
# `make` alone sets up .venv and leaves bin/islands, a wrapper that runs the venv's `islands` from any
# shell without activating the venv (the repository's islands/ folder is the package, hence bin/).

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
WRAPPER := bin/islands

.DEFAULT_GOAL := $(WRAPPER)
.PHONY: demo test lint fuzz bench docs docs-screenshots clean

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

$(WRAPPER): $(STAMP)
	@mkdir -p $(dir $@)
	@printf '#!/bin/sh\n# runs islands from the virtual environment next to this folder (written by make)\nexec "$$(dirname "$$0")/../$(BIN)/islands" "$$@"\n' > $@
	@chmod +x $@
	@echo "wrote $@: run ./$@ COMMAND, or activate the venv (. $(BIN)/activate) and run islands COMMAND"

# the demo's real run starts afresh each time (islands demo itself refuses to replace a run)
demo: $(WRAPPER)
	rm -rf out/demo/real-run
	$(BIN)/islands demo --out out/demo

test: $(WRAPPER) lint
	$(BIN)/python -m pytest -q

# ruff's rules and format, then mypy over the package as installed (tools/typecheck.py): settings in
# pyproject.toml. `make test` runs it first.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python tools/typecheck.py

# The property tests (tests/test_properties*.py: the simulator's invariants, and every file format islands
# reads drawn valid, then mutated or cut: read, or one line naming the file, never a traceback) with
# thousands of random examples each instead of the few derandomized ones `make test` runs
# (HYPOTHESIS_PROFILE, tests/conftest.py): tens of minutes.
fuzz: $(WRAPPER)
	HYPOTHESIS_PROFILE=fuzz $(BIN)/python -m pytest -q tests/test_properties*.py tests/test_exchange_calls.py

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_simulator.py
	$(BIN)/python benchmarks/bench_trainer.py
	$(BIN)/python benchmarks/bench_serve.py

# The screenshots of docs/how-to/serve.md, retaken of the live page in headless Chromium (kept as they
# are where Chromium or Playwright is missing); `make docs` retakes them first.
docs-screenshots: $(STAMP)
	$(BIN)/python docs/serve_screenshots.py

docs: $(STAMP) docs-screenshots
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) build *.egg-info $(WRAPPER) site .mypy_cache .ruff_cache
